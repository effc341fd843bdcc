"""Run the extractor's engine at vLLM's own offline batch settings, not the stock 32 prompts.

Target: ``vllm_hidden_states_generator.SchedulerConfig`` (both speculators lines).
Why: the stock config caps a step at ``MAX_NUM_SEQS`` (32) prompts and
    ``max(MIN_MAX_BATCHED_TOKENS, max_model_len)`` (8,192) tokens, a quarter of what vLLM's
    own ``LLM`` runs on an H100/H200 (1,024 prompts, 16,384 tokens); on a MoE model the small
    steps cost a third of the GPU time.  The states do not depend on the batch
    beyond bf16 rounding.
How: when the stock call passes exactly the stock defaults, the stock module's
    ``SchedulerConfig`` gets what ``EngineArgs`` would give ``vllm.LLM`` instead:
    ``EngineArgs.get_batch_defaults`` for the ``LLM_CLASS`` context on one engine (world
    size 1; only vLLM's CPU and TPU tables depend on it) and the same clamps vLLM applies
    (a step holds a whole prompt when chunked prefill is off; at most ``max_num_seqs``
    prompts of ``max_model_len``).  A step size the caller chose (0.4.x's
    ``max_num_batched_tokens``, another ``MAX_NUM_SEQS``) is kept.  Compilation stays off
    (``enforce_eager``), as the stock code sets it.  Opt out with
    ``apply(exclude=("engine_batch_defaults",))``.
Upstream change: none; the stock settings date from speculators 0.3.0.
Remove when: the extractor takes vLLM's defaults itself.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from spec_compat.engine.names import GENERATOR
from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict, signature_text

STOCK_CONSTANTS = ("MAX_NUM_SEQS", "MIN_MAX_BATCHED_TOKENS")


def batch_defaults(max_model_len: int, chunked_prefill: bool) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) as `EngineArgs` sets them for `vllm.LLM`."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    tokens, seqs = EngineArgs.get_batch_defaults(1)
    step, prompts = tokens[UsageContext.LLM_CLASS], seqs[UsageContext.LLM_CLASS]
    if not chunked_prefill:
        step = max(max_model_len, step)
    step = min(prompts * max_model_len, step)
    return min(prompts, step), step


def _stock_defaults(stock: ModuleType, kwargs: dict[str, Any]) -> bool:
    length = kwargs.get("max_model_len")
    return (
        isinstance(length, int)
        and kwargs.get("max_num_seqs") == stock.MAX_NUM_SEQS
        and kwargs.get("max_num_batched_tokens") == max(stock.MIN_MAX_BATCHED_TOKENS, length)
    )


def probe(module: ModuleType) -> Verdict:
    from vllm.engine.arg_utils import EngineArgs

    missing = [name for name in STOCK_CONSTANTS if not isinstance(getattr(module, name, None), int)]
    if missing:
        return Verdict(Need.UNKNOWN, f"no {', '.join(missing)}", "the stock settings changed")
    if not hasattr(EngineArgs, "get_batch_defaults"):
        found = "EngineArgs has no get_batch_defaults"
        return Verdict(Need.NOT_NEEDED, found, "this vLLM keeps its table private: stock kept")
    found = f"get_batch_defaults{signature_text(EngineArgs.get_batch_defaults)}"
    reason = f"stock: {module.MAX_NUM_SEQS} prompts, {module.MIN_MAX_BATCHED_TOKENS}+ tokens"
    return Verdict(Need.NEEDED, found, reason)


def wrap(original: Any) -> Any:
    def SchedulerConfig(*args: Any, **kwargs: Any) -> Any:
        if _stock_defaults(importlib.import_module(GENERATOR), kwargs):
            chunked = kwargs.get("enable_chunked_prefill", True) is not False
            seqs, step = batch_defaults(kwargs["max_model_len"], chunked)
            kwargs.update(max_num_seqs=seqs, max_num_batched_tokens=step)
        return original(*args, **kwargs)

    return SchedulerConfig


PATCH = declare(
    __name__,
    target="SchedulerConfig",
    summary="vLLM's own offline batch settings (prompts and tokens a step), not 32 prompts",
    before=("v030_whole_prompt_prefill",),  # that one sets the chunked prefill this one reads
)
