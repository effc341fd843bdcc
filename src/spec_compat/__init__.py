"""spec_compat: run the stock speculators hidden-state extractor unchanged on newer vLLM.

    import spec_compat
    spec_compat.apply()          # before the extractor is built

Importing this package and calling `apply()` imports neither torch nor vllm: patches for
speculators modules that are not imported yet land when they are.
"""

from __future__ import annotations

from collections.abc import Iterable

from .registry import ENV_PATCHES, Patch, Registry, Result, Side, State, UnsupportedDrift

__version__ = "0.1.0"
__all__ = [
    "ENV_PATCHES",
    "REGISTRY",
    "Patch",
    "Result",
    "State",
    "UnsupportedDrift",
    "apply",
    "revert",
    "status",
]


def _build_registry() -> Registry:
    from .patches import ALL

    registry = Registry()
    for patch in ALL:
        registry.register(patch)
    return registry


REGISTRY = _build_registry()


def apply(
    only: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
    *,
    side: Side | None = None,
) -> list[Result]:
    """Select patches and apply them now or when their speculators module is imported.

    `only`: apply just these patch names; `exclude`: leave these out; `side`: only driver or
    worker patches.  Idempotent.  Raises `UnsupportedDrift` (naming each patch, its target
    and the signature found) when the installed code has a shape no patch knows, and
    `ValueError` for an unknown patch name.  Worker processes pick the same selection up
    through the `vllm.general_plugins` entry point (see `spec_compat.plugin`).
    """
    return REGISTRY.apply(only, exclude, side)


def revert() -> None:
    """Put every replaced name back (the exact original objects) and clear the selection."""
    REGISTRY.revert()


def status() -> list[Result]:
    """One `Result` per selected patch: applied, not needed, skipped, pending, unsupported."""
    return REGISTRY.status()
