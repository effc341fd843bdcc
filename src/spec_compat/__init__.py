"""spec_compat: run the stock speculators hidden-state extractor unchanged on newer vLLM.

    import spec_compat
    spec_compat.apply()          # before the extractor is built

Importing this package and calling `apply()` imports neither torch nor vllm: patches for
speculators modules that are not imported yet land when they are.

The package re-exports; nothing inside it imports this facade (docs/architecture.md has the
layers and the rule, `tests/test_layers.py` holds them).
"""

from __future__ import annotations

from spec_compat.api import REGISTRY, __version__, applied_imports, apply, revert, status
from spec_compat.engine.names import ENV_PATCHES, ENV_STRICT
from spec_compat.engine.patch import ImportPatch, Patch, Result, Side, State, UnsupportedDrift

__all__ = [
    "ENV_PATCHES",
    "ENV_STRICT",
    "REGISTRY",
    "ImportPatch",
    "Patch",
    "Result",
    "Side",
    "State",
    "UnsupportedDrift",
    "UnsupportedModel",
    "__version__",
    "applied_imports",
    "apply",
    "revert",
    "status",
]


def __getattr__(name: str) -> type:
    if name == "UnsupportedModel":  # spec_compat.models.support (json, pathlib) loads on use
        from spec_compat.models.support import UnsupportedModel

        return UnsupportedModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
