"""Let speculators 0.3.0's patched forward find the renamed embedding method.

Target: ``custom_worker._patched_forward`` (speculators 0.3.0), in every vLLM worker process.
Why: vLLM 0.11.1 renamed the base models' ``get_input_embeddings(ids)`` to
    ``embed_input_ids(ids)`` with no alias; the 0.3.0 forward calls the old name and the
    worker raises ``AttributeError`` on the first step.
How: the name ``_patched_forward`` in the stock worker module (bound onto the base model at
    capture set-up) becomes a wrapper that gives the model *instance* a
    ``get_input_embeddings`` alias of ``embed_input_ids`` when it lacks one, then runs the
    stock forward unchanged.  vLLM's classes are untouched.  ``worker_eagle3_capture``
    (selected by default) replaces the set-up that binds ``_patched_forward``, so where it
    applies this patch is superseded and not applied: it serves a selection without it.
Upstream change: vLLM 0.11.1, every base model (LlamaModel, Qwen2Model, DeepseekV2Model...).
Remove when: speculators 0.3.0 is no longer used (0.4.x calls ``embed_input_ids``).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.names import WORKER
from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict
from spec_compat.engine.stock_source import stock_mentions

OLD, NEW = "get_input_embeddings", "embed_input_ids"


def probe(module: ModuleType) -> Verdict:
    if not stock_mentions(module, f"self.{OLD}"):
        return Verdict(Need.NOT_NEEDED, f"the stock forward does not call {OLD}")
    from vllm.model_executor.models.llama import LlamaModel

    found = f"LlamaModel.{OLD}: {hasattr(LlamaModel, OLD)}, .{NEW}: {hasattr(LlamaModel, NEW)}"
    if hasattr(LlamaModel, OLD):
        return Verdict(Need.NOT_NEEDED, found)
    if hasattr(LlamaModel, NEW):
        return Verdict(Need.NEEDED, found, f"{OLD} was renamed {NEW}")
    return Verdict(Need.UNKNOWN, found, "neither embedding method exists")


def wrap(original: Any) -> Any:
    def _patched_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not hasattr(self, OLD):
            object.__setattr__(self, OLD, getattr(self, NEW))
        return original(self, *args, **kwargs)

    return _patched_forward


PATCH = declare(
    __name__,
    side="worker",
    module=WORKER,
    target="_patched_forward",
    summary="speculators 0.3.0 worker: alias get_input_embeddings -> embed_input_ids",
    speculators="<0.4",
    superseded_by=("worker_eagle3_capture",),  # its capture never binds _patched_forward
)
