"""Give ``Scheduler`` the block size the engine core would give it.

Target: ``vllm_hidden_states_generator.Scheduler`` (speculators 0.3.0 and 0.4.x).
Why: vLLM 0.11.1 made ``block_size`` a required ``Scheduler.__init__`` parameter; the stock
    0.3.0 call omits it (``TypeError``).  0.4.x passes its constant ``VLLM_BLOCK_SIZE`` (16),
    which is wrong wherever the cache gets another block size: the CPU attention kernels'
    (``cpu_attention_block_size``), and on every platform a hybrid model's, whose scheduler
    block is the LCM of its KV-cache groups' (vLLM's coordinator asserts it; seen on the
    H200 with CUDA vLLM 0.26, Qwen3-Next, Qwen3.5 and Nemotron-H).  Only the model's groups,
    known once the cache is planned, say which.
How: the stock module's ``Scheduler`` computes the value as ``EngineCore`` does: from 0.20
    ``kv_cache_utils.resolve_kv_cache_block_sizes`` (which also gives ``hash_block_size``),
    before that ``cache_config.block_size`` times the decode and prefill context-parallel
    sizes.  A stock value that disagrees with it is replaced.
Upstream change: vLLM 0.11.1 ``v1/core/sched/scheduler.py``; 0.20 added ``hash_block_size``.
Remove when: the extractor derives the block size from the engine.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict, binding_probe, missing_and_unexpected
from spec_compat.engine.stock_source import stock_calls
from spec_compat.patches._cpu import cpu_block_size
from spec_compat.patches._stock import parameters

ADDED = {"block_size", "hash_block_size"}


def _installed() -> Any:
    from vllm.v1.core.sched.scheduler import Scheduler

    return Scheduler


def probe(module: ModuleType) -> Verdict:
    def fixable(call, params) -> bool:
        missing, unexpected = missing_and_unexpected(call, params)
        return (
            not unexpected
            and missing <= ADDED
            and {"vllm_config", "kv_cache_config"} <= (call.keywords)
        )

    verdict = binding_probe(module, "Scheduler", _installed(), fixable)
    stock = getattr(module, "VLLM_BLOCK_SIZE", None)
    passes_constant = any("block_size" in c.keywords for c in stock_calls(module, "Scheduler"))
    if verdict.need is Need.NOT_NEEDED and passes_constant and isinstance(stock, int):
        real = cpu_block_size(stock)
        why = (
            f"stock block_size={stock}, cache has {real}"
            if real != stock
            else f"stock block_size={stock}; a hybrid model's groups need their LCM"
        )
        return Verdict(Need.NEEDED, verdict.found, why)
    return verdict


def engine_block_sizes(vllm_config: Any, kv_cache_config: Any) -> dict[str, int | None]:
    from vllm.v1.core import kv_cache_utils

    resolve = getattr(kv_cache_utils, "resolve_kv_cache_block_sizes", None)
    if resolve is not None:
        block_size, hash_block_size = resolve(kv_cache_config, vllm_config)
        return {"block_size": block_size, "hash_block_size": hash_block_size}
    parallel = vllm_config.parallel_config
    block_size = (
        vllm_config.cache_config.block_size
        * getattr(parallel, "decode_context_parallel_size", 1)
        * getattr(parallel, "prefill_context_parallel_size", 1)
    )
    return {"block_size": block_size}


def wrap(original: Any) -> Any:
    accepted = parameters(original)

    def Scheduler(*args: Any, **kwargs: Any) -> Any:
        if "block_size" in accepted:
            sizes = engine_block_sizes(kwargs["vllm_config"], kwargs["kv_cache_config"])
            kwargs.update({k: v for k, v in sizes.items() if k in accepted})
        return original(*args, **kwargs)

    return Scheduler


PATCH = declare(
    __name__,
    fixes=("Scheduler",),
    target="Scheduler",
    summary="pass Scheduler the block size EngineCore would (required since 0.11.1)",
)
