"""Resolve the KV-cache layout the way the engine core does, before the stock code plans.

Target: ``vllm_hidden_states_generator.MultiprocExecutor`` (speculators 0.3.0 and 0.4.x).
Why: from vLLM 0.29, ``get_kv_cache_config_from_groups`` reads
    ``cache_config.get_resolved_kv_cache_layout()``, which raises "KV cache layout has not
    been resolved yet" unless ``EngineCore`` resolved it; the stock extractors build the
    executor themselves and never do.
How: the stock module's ``MultiprocExecutor`` is a subclass that, right after the workers
    start, resolves the layout from the workers' KV-cache specs and supported layouts
    (``resolve_kv_cache_layout``, which records it on ``cache_config``), publishes it with
    ``set_kv_cache_layout``, and copies it into every ``KVCacheConfig`` passed to
    ``initialize_from_config`` - the three steps of ``EngineCore._initialize_kv_caches``.
Upstream change: vLLM 0.29.0 ``config/cache.py`` (``kv_cache_layout``) and
    ``v1/engine/core.py``; 0.33 adds a second ``set_kv_cache_layout`` argument.
Remove when: the extractor builds its engine through ``EngineCore`` (speculators >= 0.5).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict
from spec_compat.patches._stock import parameters


def probe(module: ModuleType) -> Verdict:
    from vllm.config import CacheConfig

    if not hasattr(CacheConfig, "get_resolved_kv_cache_layout"):
        return Verdict(Need.NOT_NEEDED, "CacheConfig has no kv_cache_layout to resolve")
    try:
        from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
    except ImportError as exc:
        return Verdict(Need.UNKNOWN, f"CacheConfig.get_resolved_kv_cache_layout exists; {exc}")
    return Verdict(
        Need.NEEDED,
        f"resolve_kv_cache_layout{_signature(resolve_kv_cache_layout)}",
        "the layout must be resolved before KV planning",
    )


def _signature(fn: Any) -> str:
    return "(" + ", ".join(parameters(fn)) + ")"


def resolve_layout(executor: Any) -> None:
    from vllm.v1.attention.backends.utils import resolve_kv_cache_layout

    config = executor.vllm_config
    specs = executor.collective_rpc("get_kv_cache_spec")
    layout = resolve_kv_cache_layout(
        config,
        executor.get_supported_kv_cache_layouts(),
        [spec for per_worker in specs for spec in per_worker.values()],
    )
    if len(parameters(executor.set_kv_cache_layout)) >= 2:  # 0.33: interleave size too
        executor.set_kv_cache_layout(
            layout.name, config.parallel_config.cp_kv_cache_interleave_size
        )
    else:
        executor.set_kv_cache_layout(layout.name)


def wrap(original: type) -> type:
    class MultiprocExecutor(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            resolve_layout(self)

        def initialize_from_config(self, kv_cache_configs: list[Any]) -> Any:
            layout = self.vllm_config.cache_config.kv_cache_layout
            for kv_cache_config in kv_cache_configs:
                kv_cache_config.kv_cache_layout = layout
            return super().initialize_from_config(kv_cache_configs)

    return MultiprocExecutor


PATCH = declare(
    __name__,
    target="MultiprocExecutor",
    summary="resolve and publish the KV-cache layout as EngineCore does (0.29+)",
)
