"""Hand a hybrid model's per-layer KV-cache specs to the planner instead of one group.

Target: ``vllm_hidden_states_generator._get_kv_cache_groups_uniform_spec`` (speculators
    0.3.0 and 0.4.x).
Why: the stock code puts every layer in one uniform KV-cache group, which vLLM refuses for
    models whose layers need different specs (attention beside Mamba-2 / Gated DeltaNet
    state); vLLM's engine splits them into groups with ``get_kv_cache_groups(vllm_config,
    specs)``, which needs the ``VllmConfig`` this call does not get.
How: uniform specs get vLLM's uniform group as before.  Other specs come back as
    ``LayerSpecs``, a list of one group per layer that also carries the per-layer specs, so
    ``kv_cache_hybrid_plan`` (which sees the ``VllmConfig``) can group them as
    ``EngineCore`` does.  ``LayerSpecs`` is the declared value the two patches share.
Upstream change: vLLM's hybrid KV-cache manager (``get_kv_cache_groups``, v1).
Remove when: the extractor plans with ``get_kv_cache_configs`` as ``EngineCore`` does.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict, first_attr, signature_text
from spec_compat.engine.stock_source import stock_calls

CALL = "_get_kv_cache_groups_uniform_spec"
PLANNER = "get_kv_cache_groups"
PLANNER_PARAMETERS = ["vllm_config", "kv_cache_spec"]


class LayerSpecs(list):
    """One KV-cache group per layer (a valid plan on its own) plus the layers' specs, for
    ``kv_cache_hybrid_plan`` to regroup with vLLM's planner."""

    def __init__(self, specs: dict[str, Any]) -> None:
        from vllm.v1.kv_cache_interface import KVCacheGroupSpec

        super().__init__(KVCacheGroupSpec([name], spec) for name, spec in specs.items())
        self.specs = dict(specs)


def _planning(name: str) -> Any:
    """A KV-planning helper of vLLM's (moved to `kv_cache_planning` in 0.33)."""
    return first_attr(
        [f"vllm.v1.core.kv_cache_planning:{name}", f"vllm.v1.core.kv_cache_utils:{name}"]
    )


def engine_planner() -> Any:
    return _planning(PLANNER)


def engine_planner_probe(module: ModuleType, call: str) -> Verdict:
    """Needed wherever the stock code calls `call` and vLLM has its multi-group planner with
    the signature this patch set calls; anything else is drift."""
    import inspect

    if not stock_calls(module, call):
        return Verdict(Need.UNKNOWN, f"no call to {call} in {module.__name__}")
    try:
        planner = engine_planner()
    except ImportError as exc:
        return Verdict(Need.UNKNOWN, str(exc), "vLLM's multi-group KV planner is gone")
    found = signature_text(planner)
    if list(inspect.signature(planner).parameters) != PLANNER_PARAMETERS:
        return Verdict(Need.UNKNOWN, found, "vLLM's multi-group KV planner changed")
    return Verdict(Need.NEEDED, found, "the stock code plans one uniform KV-cache group")


def probe(module: ModuleType) -> Verdict:
    return engine_planner_probe(module, CALL)


def wrap(original: Any) -> Any:
    def _get_kv_cache_groups_uniform_spec(kv_cache_specs: dict[str, Any]) -> Any:
        if not kv_cache_specs or _planning("is_kv_cache_spec_uniform")(kv_cache_specs):
            return original(kv_cache_specs)
        return LayerSpecs(kv_cache_specs)

    return _get_kv_cache_groups_uniform_spec


PATCH = declare(
    __name__,
    target=CALL,
    summary="hybrid models: keep per-layer KV specs for vLLM's multi-group planner",
    requires=("kv_cache_hybrid_plan",),
)
