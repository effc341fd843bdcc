"""The public entry points: this process's one patch registry, with every patch of
`spec_compat.patches` listed in it, and `apply()`, `revert()`, `status()` on it.

Importing this module and calling `apply()` imports neither torch nor vllm: patches for
speculators modules that are not imported yet land when they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType

from spec_compat.engine.names import GENERATOR, WORKER
from spec_compat.engine.patch import ImportPatch, Result, Side, State
from spec_compat.engine.registry import Registry, set_process_registry

__version__ = "0.1.0"


def _build_registry() -> Registry:
    from spec_compat.engine.requirements import REQUIREMENTS
    from spec_compat.patches import LISTING, RENAMED, load

    registry = Registry(
        requirements=REQUIREMENTS,
        renamed=RENAMED,
        preflight=_preflight,
        listing=LISTING,
        load=load,  # the patch modules: once a module they target is imported
    )
    set_process_registry(registry)
    return registry


def _preflight(module: ModuleType, applied: list[str]) -> list[Result]:
    """The generic drift check of a stock module, once its patches are in place: every call
    into vLLM must bind, or be repaired by an applied patch."""
    from spec_compat.engine.drift import check, moved_imports

    if module.__name__ not in (GENERATOR, WORKER):
        return []
    patches = [REGISTRY.patches[name] for name in applied]
    return [
        Result(
            name=f"drift at {point.module}:{point.line}",
            side="driver" if module.__name__ == GENERATOR else "worker",
            target=f"{point.call}(...) -> {point.target}",
            state=State.UNSUPPORTED,
            reason=point.error,
            found=point.signature,
        )
        for point in check(module.__name__, patches, moved=moved_imports(applied_imports()))
        if point.drift and not point.covered_by
    ]


def applied_imports() -> list[ImportPatch]:
    """The import-time patches applied in this process."""
    return [
        patch
        for r in REGISTRY.status()
        if r.state is State.APPLIED and isinstance(patch := REGISTRY.patches[r.name], ImportPatch)
    ]


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
    installed signatures (`spec_compat.engine.drift`); a call that does not bind and that no applied
    patch repairs raises `UnsupportedDrift` too.  `strict=False` (experts) skips that check.
    """
    return REGISTRY.apply(only, exclude, side, strict)


def revert() -> None:
    """Put every replaced name back (the exact original objects) and clear the selection."""
    REGISTRY.revert()


def status() -> list[Result]:
    """One `Result` per selected patch: applied, not needed, skipped, pending, unsupported."""
    return REGISTRY.status()
