"""Let ``import speculators`` survive model modules that need removed transformers APIs.

Target: ``speculators.utils.auto_importer.AutoImporterMixin.auto_import_package_modules``
    (0.3.0 and 0.4.x), in the driver and in every vLLM worker.
Why: ``import speculators`` auto-imports ``speculators.models`` to fill its config and model
    registries; ``models/eagle.py`` imports ``transformers.modeling_attn_mask_utils``, which
    newer transformers 5 releases removed.  vLLM >= 0.24 accepts any transformers >= 5.5.3,
    so a fresh install cannot import the extractor at all - although the extractor uses
    none of speculators' model classes.
How: when that auto-import fails because a ``transformers`` module is missing, the registry
    is left without speculators' model classes and a warning names the missing module; any
    other ImportError still raises.  The extractor is unaffected; speculators' training and
    conversion code in the same process will report unregistered models.
Upstream change: transformers 5.2x removed ``modeling_attn_mask_utils``.
Remove when: speculators stops importing removed transformers modules.
"""

from __future__ import annotations

import importlib.util
import warnings
from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict

REMOVED = "transformers.modeling_attn_mask_utils"
USER = "models/eagle.py"  # inside the speculators package


def _stock_source() -> str:
    # Not find_spec("speculators.models.eagle"): that imports speculators.models, the very
    # import that fails.
    from pathlib import Path  # here: apply() does not need it (pathlib loads urllib)

    spec = importlib.util.find_spec("speculators")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / USER
        if path.exists():
            return path.read_text(encoding="utf-8")
    return ""


def _installed(module_name: str) -> bool:
    try:
        return importlib.util.find_spec(module_name) is not None
    except ImportError:
        return False


def probe(module: ModuleType) -> Verdict:
    if not hasattr(getattr(module, "AutoImporterMixin", None), "auto_import_package_modules"):
        return Verdict(Need.UNKNOWN, "no AutoImporterMixin.auto_import_package_modules")
    uses = REMOVED in _stock_source()
    present = _installed(REMOVED)
    found = f"{USER} imports {REMOVED}: {uses}; installed transformers has it: {present}"
    if uses and not present:
        return Verdict(Need.NEEDED, found, "speculators.models cannot import")
    return Verdict(Need.NOT_NEEDED, found)


def wrap(original: Any) -> Any:
    function = original.__func__

    def auto_import_package_modules(cls: Any) -> Any:
        try:
            return function(cls)
        except ImportError as exc:
            if not (exc.name or "").startswith("transformers"):
                raise
            warnings.warn(
                f"spec_compat: speculators' model classes are unavailable here ({exc}); "
                "the hidden-state extractor does not use them",
                RuntimeWarning,
                stacklevel=2,
            )
            cls.auto_imported_modules = list(getattr(cls, "auto_imported_modules", None) or [])
            return None

    return classmethod(auto_import_package_modules)


PATCH = declare(
    __name__,
    side="both",
    module="speculators.utils.auto_importer",
    target="AutoImporterMixin.auto_import_package_modules",
    summary="import speculators when its model modules need removed transformers APIs",
)
