"""Let ``import speculators`` resolve transformers 5's ``"torch.dtype"`` annotation.

Target: ``speculators.utils.pydantic_utils.ReloadableBaseModel.reload_schema`` (0.3.0 and
    0.4.x), in the driver and in every vLLM worker (both import the ``speculators`` package).
Why: transformers 5 annotates ``PretrainedConfig.dtype`` as the string
    ``"str | torch.dtype | None"``.  speculators' configs subclass it, and ``import
    speculators`` rebuilds their pydantic schemas (``model_rebuild(force=True)``) in a
    namespace without ``torch``: ``PydanticUndefinedAnnotation: name 'torch' is not defined``.
    vLLM >= 0.24 requires transformers >= 5.5, so the stock extractor cannot even import.
How: the stock ``reload_schema`` classmethod is replaced by one that rebuilds with
    ``torch`` in the types namespace; nothing else about the schemas changes.  It lands
    through a post-import hook on ``speculators.utils.pydantic_utils``, which runs before
    ``speculators/__init__`` calls the rebuild.
Upstream change: transformers 5 (``PretrainedConfig`` became an annotated dataclass-style
    class); vLLM 0.24 raised its transformers floor to 5.5.3.
Remove when: speculators rebuilds its schemas with a complete namespace.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict


def _string_torch_annotations() -> dict[str, str]:
    """PretrainedConfig annotations that name torch only as a forward reference."""
    from transformers import PretrainedConfig

    found: dict[str, Any] = {}
    for klass in reversed(PretrainedConfig.__mro__):
        found.update(getattr(klass, "__annotations__", {}))
    # A string annotation, or a typing construct holding ForwardRef('torch...') (3.12 keeps
    # `Union[str, "torch.dtype"]` as such): both need `torch` in the rebuild namespace.
    return {
        k: str(v)
        for k, v in found.items()
        if (isinstance(v, str) and "torch" in v) or "ForwardRef('torch" in repr(v)
    }


def probe(module: ModuleType) -> Verdict:
    stock = getattr(getattr(module, "ReloadableBaseModel", None), "reload_schema", None)
    if stock is None:
        return Verdict(Need.UNKNOWN, f"no ReloadableBaseModel.reload_schema in {module.__name__}")
    refs = _string_torch_annotations()
    found = f"PretrainedConfig string annotations naming torch: {refs or 'none'}"
    if refs:
        return Verdict(Need.NEEDED, found, "schema rebuild cannot resolve 'torch'")
    return Verdict(Need.NOT_NEEDED, found)


def wrap(original: Any) -> Any:
    def reload_schema(cls: Any) -> None:
        import torch

        cls.model_rebuild(force=True, _types_namespace={"torch": torch})

    return classmethod(reload_schema)


PATCH = declare(
    __name__,
    side="both",
    module="speculators.utils.pydantic_utils",
    target="ReloadableBaseModel.reload_schema",
    summary="import speculators under transformers 5 (pydantic: name 'torch' is not defined)",
)
