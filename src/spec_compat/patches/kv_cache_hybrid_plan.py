"""Plan a hybrid model's KV cache as several groups, the way vLLM's engine core does.

Target: ``vllm_hidden_states_generator.get_kv_cache_config_from_groups`` (speculators
    0.3.0 and 0.4.x).
Why: models that mix attention with Mamba-2 / Gated DeltaNet / linear-attention state need
    one KV-cache group per kind of layer, coordinated by the scheduler; the stock code plans
    one uniform group and fails after the load.
How: when ``kv_cache_hybrid_groups`` handed over ``LayerSpecs``, the groups are made by
    vLLM's own ``get_kv_cache_groups(vllm_config, specs)`` (what ``get_kv_cache_configs``
    does in ``EngineCore._initialize_kv_caches``) and then sized by the stock call;
    ``cache_config.block_size`` becomes the smallest prefix-cacheable group block size, as
    the engine core sets it.  Any other call passes through untouched.
Upstream change: vLLM's hybrid KV-cache manager (v1 ``get_kv_cache_groups``).
Remove when: the extractor plans with ``get_kv_cache_configs`` as ``EngineCore`` does.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Verdict
from spec_compat.patches.kv_cache_hybrid_groups import (
    LayerSpecs,
    engine_planner,
    engine_planner_probe,
)

CALL = "get_kv_cache_config_from_groups"


def probe(module: ModuleType) -> Verdict:
    return engine_planner_probe(module, CALL)


def engine_block_size(kv_cache_groups: list[Any]) -> int:
    """`EngineCore`: the smallest block size of the groups that take part in prefix
    caching (all groups where the spec does not say)."""
    specs = [group.kv_cache_spec for group in kv_cache_groups]
    cacheable = [s.block_size for s in specs if getattr(s, "prefix_cacheable", True)]
    return min(cacheable or [s.block_size for s in specs])


def wrap(original: Any) -> Any:
    def get_kv_cache_config_from_groups(*args: Any, **kwargs: Any) -> Any:
        groups = kwargs.get("kv_cache_groups")
        if not isinstance(groups, LayerSpecs):
            return original(*args, **kwargs)
        vllm_config = kwargs["vllm_config"]
        kwargs["kv_cache_groups"] = engine_planner()(vllm_config, dict(groups.specs))
        vllm_config.cache_config.block_size = engine_block_size(kwargs["kv_cache_groups"])
        return original(*args, **kwargs)

    return get_kv_cache_config_from_groups


PATCH = declare(
    __name__,
    target=CALL,
    summary="hybrid models: KV-cache groups from vLLM's own planner, as EngineCore makes them",
    requires=("kv_cache_hybrid_groups",),
    after=("kv_cache_config_specs",),  # it wraps that patch's adapter
)
