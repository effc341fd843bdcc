"""spec_compat: run the stock speculators hidden-state extractor unchanged on newer vLLM.

    import spec_compat
    spec_compat.apply()          # before the extractor is built

Importing this package and calling `apply()` imports neither torch nor vllm: patches for
speculators modules that are not imported yet land when they are.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from types import ModuleType

from .capture import UnsupportedModel
from .registry import (
    ENV_PATCHES,
    ENV_STRICT,
    Patch,
    Registry,
    Result,
    Side,
    State,
    UnsupportedDrift,
)

__version__ = "0.1.0"
__all__ = [
    "ENV_PATCHES",
    "ENV_STRICT",
    "REGISTRY",
    "Patch",
    "Result",
    "State",
    "UnsupportedDrift",
    "UnsupportedModel",
    "apply",
    "revert",
    "status",
]


def _build_registry() -> Registry:
    from .patches import ALL

    registry = Registry(preflight=_preflight)
    for patch in ALL:
        registry.register(patch)
    return registry


def _preflight(module: ModuleType, applied: list[str]) -> list[Result]:
    """The generic drift check of a stock module, once its patches are in place: every call
    into vLLM must bind, or be repaired by an applied patch."""
    from .drift import check, moved_imports
    from .patches import IMPORT_PATCHES
    from .patches._stock import GENERATOR, WORKER

    if module.__name__ not in (GENERATOR, WORKER):
        return []
    patches = [REGISTRY.patches[name] for name in applied]
    moved = moved_imports(applied_import_patches(IMPORT_PATCHES))
    return [
        Result(
            name=f"drift at {point.module}:{point.line}",
            side="driver" if module.__name__ == GENERATOR else "worker",
            target=f"{point.call}(...) -> {point.target}",
            state=State.UNSUPPORTED,
            reason=point.error,
            found=point.signature,
        )
        for point in check(module.__name__, patches, moved=moved)
        if point.drift and not point.covered_by
    ]


def applied_import_patches(candidates: Iterable) -> list:
    applied = {r.name for r in REGISTRY.status() if r.state is State.APPLIED}
    return [p for p in candidates if p.name in applied]


REGISTRY = _build_registry()


def apply(
    only: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
    *,
    side: Side | None = None,
    strict: bool = True,
) -> list[Result]:
    """Select patches and apply them now or when their speculators module is imported.

    `only`: apply just these patch names; `exclude`: leave these out; `side`: only driver or
    worker patches.  Idempotent.  Raises `UnsupportedDrift` (naming each patch, its target
    and the signature found) when the installed code has a shape no patch knows, and
    `ValueError` for an unknown patch name.  Every process this one starts (spawned vLLM
    workers, `multiprocessing` children) applies the same selection from its first line:
    the environment carries it to the start-up hook (`spec_compat.startup`).

    Once a stock module is patched, every call it makes into vLLM is bound against the
    installed signatures (`spec_compat.drift`); a call that does not bind and that no applied
    patch repairs raises `UnsupportedDrift` too.  `strict=False` (experts) skips that check.
    """
    from . import requirements_gate
    from .patches import IMPORT_PATCHES

    only = None if only is None else _current_names(only)
    import_names = {p.name for p in IMPORT_PATCHES}
    excluded = set(_current_names(exclude or ()))
    requirements_gate.GATE.import_patches = [
        p
        for p in IMPORT_PATCHES
        if (only is None or p.name in only) and p.name not in excluded and side != "worker"
    ]
    requirements_gate.GATE.on_decision = REGISTRY.record
    requirements_gate.install()
    results = REGISTRY.apply(
        None if only is None else [n for n in only if n not in import_names],
        [n for n in excluded if n not in import_names],
        side,
        strict,
    )
    if side is None:  # what the start-up hook applies in every child (spec_compat.startup)
        names = os.environ[ENV_PATCHES].split(",")
        names += [p.name for p in requirements_gate.GATE.import_patches]
        os.environ[ENV_PATCHES] = ",".join(dict.fromkeys(n for n in names if n))
        os.environ[ENV_STRICT] = "1" if strict else "0"
    return results


def _current_names(names: Iterable[str]) -> list[str]:
    """Patch names with former names mapped to the patch that replaced them (warned)."""
    import warnings

    from .patches import RENAMED

    current = []
    for name in names:
        if name in RENAMED:
            warnings.warn(
                f"patch {name!r} is now part of {RENAMED[name]!r}; use that name",
                DeprecationWarning,
                stacklevel=3,
            )
        current.append(RENAMED.get(name, name))
    return list(dict.fromkeys(current))


def revert() -> None:
    """Put every replaced name back (the exact original objects) and clear the selection."""
    from . import requirements_gate

    requirements_gate.uninstall()
    REGISTRY.revert()
    os.environ.pop(ENV_STRICT, None)


def status() -> list[Result]:
    """One `Result` per selected patch: applied, not needed, skipped, pending, unsupported."""
    return REGISTRY.status()
