"""Turn vLLM's extensible KV cache off in the stock ``CacheConfig``.

Target: ``vllm_hidden_states_generator.CacheConfig`` (speculators 0.3.0 and 0.4.x).
Why: from vLLM 0.34 ``enable_extensible_kv_cache`` resolves on by default on CUDA and ROCm:
    the workers reserve the KV cache's address range and commit only the null block, and
    ``EngineCore`` commits the rest after warm-up (``finalize_extensible_kv_cache``, then
    ``executor.extend_kv_cache``).  The stock extractor drives the executor itself and
    never commits it, so its steps write KV blocks no memory backs.
How: the stock module's ``CacheConfig`` passes ``enable_extensible_kv_cache=False`` unless
    the caller sets it: the KV cache is allocated up front from the profiled memory, as
    the stock code sizes it (``gpu_memory_utilization``), and as vLLM does where the
    extensible cache is unsupported.
Upstream change: vLLM 0.34.0 ``config/cache.py`` (``enable_extensible_kv_cache``) and
    ``config/vllm.py`` (``_resolve_extensible_kv_cache``).
Remove when: the extractor runs on vLLM's engine core, or commits the cache itself.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict, signature_text
from spec_compat.engine.stock_source import stock_passes
from spec_compat.patches._stock import parameters, with_kwargs

FIELD = "enable_extensible_kv_cache"


def probe(module: ModuleType) -> Verdict:
    from vllm.config import CacheConfig

    found = signature_text(CacheConfig)
    if FIELD not in parameters(CacheConfig):
        return Verdict(Need.NOT_NEEDED, found, f"no {FIELD}: the cache is allocated up front")
    if stock_passes(module, "CacheConfig", FIELD):
        return Verdict(Need.NOT_NEEDED, found, f"the stock call sets {FIELD}")
    return Verdict(Need.NEEDED, found, f"{FIELD} is on for CUDA; the stock loop never commits")


def wrap(original: Any) -> Any:
    return with_kwargs(original, lambda kw: kw.setdefault(FIELD, False))


PATCH = declare(
    __name__,
    target="CacheConfig",
    summary="turn the extensible KV cache off (only vLLM's engine core commits its blocks)",
)
