"""Give ``Scheduler`` the scheduler's view of the KV-cache config, as ``EngineCore`` does.

Target: ``vllm_hidden_states_generator.Scheduler`` (speculators 0.3.0 and 0.4.x).
Why: vLLM plans layers of one kind whose sizes differ (Gemma 4: sliding and full attention
    with different head sizes) as one group whose spec is ``UniformTypeKVCacheSpecs``.  The
    workers allocate from that per-layer spec; the scheduler needs one representative spec
    per group, which ``EngineCore`` makes with ``generate_scheduler_kv_cache_config``.  The
    stock code hands the scheduler the workers' config, and vLLM's KV-cache coordinator
    fails after the load: "No manager registered for KVCacheSpec UniformTypeKVCacheSpecs".
How: the stock module's ``Scheduler`` gets ``generate_scheduler_kv_cache_config([config])``
    where that view differs from the workers' config (a group with a per-layer spec); any
    other config passes through as the same object.  The workers keep the stock config.
Upstream change: vLLM's ``UniformTypeKVCacheSpecs`` and the scheduler's view of it
    (``v1/core/kv_cache_utils.py``).
Remove when: the extractor builds its scheduler from ``generate_scheduler_kv_cache_config``
    as ``EngineCore`` does.
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict, first_attr, signature_text
from spec_compat.engine.stock_source import stock_passes

VIEW = "generate_scheduler_kv_cache_config"
VIEW_PARAMETERS = ["kv_cache_configs"]


def scheduler_view() -> Any:
    return first_attr(
        [f"vllm.v1.core.kv_cache_utils:{VIEW}", f"vllm.v1.core.kv_cache_planning:{VIEW}"]
    )


def per_layer_spec() -> type | None:
    from vllm.v1 import kv_cache_interface

    return getattr(kv_cache_interface, "UniformTypeKVCacheSpecs", None)


def probe(module: ModuleType) -> Verdict:
    if not stock_passes(module, "Scheduler", "kv_cache_config"):
        return Verdict(Need.UNKNOWN, "Scheduler", "the stock code no longer passes kv_cache_config")
    try:
        view = scheduler_view()
    except ImportError as exc:
        if per_layer_spec() is None:
            return Verdict(Need.NOT_NEEDED, str(exc), "vLLM has no per-layer KV-cache specs")
        return Verdict(Need.UNKNOWN, str(exc), "vLLM's scheduler view of the config is gone")
    found = signature_text(view)
    if list(inspect.signature(view).parameters) != VIEW_PARAMETERS:
        return Verdict(Need.UNKNOWN, found, "vLLM's scheduler view of the config changed")
    return Verdict(Need.NEEDED, found, "the stock scheduler gets the workers' KV-cache config")


def wrap(original: Any) -> Any:
    def Scheduler(*args: Any, **kwargs: Any) -> Any:
        config, per_layer = kwargs["kv_cache_config"], per_layer_spec()
        specs = [group.kv_cache_spec for group in config.kv_cache_groups]
        if per_layer and any(isinstance(spec, per_layer) for spec in specs):
            kwargs["kv_cache_config"] = scheduler_view()([config])
        return original(*args, **kwargs)

    return Scheduler


PATCH = declare(
    __name__,
    target="Scheduler",
    summary="hand Scheduler the scheduler's view of the KV-cache config, as EngineCore does",
    after=("scheduler_block_size",),  # the block sizes are resolved on the scheduler's view
)
