"""Leave a hybrid model's KV-cache specs to vLLM's own planner instead of failing on them.

Target: ``vllm_hidden_states_generator.unify_hybrid_kv_cache_specs`` (speculators 0.3.0 and
    0.4.x).
Why: the stock code forces every layer's KV-cache spec into one type before planning one
    uniform group.  Models that mix attention with state layers (Mamba-2, Gated DeltaNet,
    linear attention: Nemotron-H, Qwen3-Next, Qwen3.5) cannot be unified, and vLLM raises
    "Failed to promote local KV cache specs to one unified type" after the model loaded.
    vLLM's own engine plans such models as several groups and never calls this function
    (only with ``disable_hybrid_kv_cache_manager``).
How: the stock module's name calls vLLM's function as before; where vLLM itself cannot
    unify the specs (it raises ``ValueError`` or ``NotImplementedError``), the specs stay as
    the workers reported them, for ``kv_cache_hybrid_groups`` and ``kv_cache_hybrid_plan``
    to plan the way ``EngineCore`` does.  Every model the stock code could plan is planned
    exactly as before.
Upstream change: vLLM's hybrid KV-cache manager (``get_kv_cache_groups``, v1); the stock
    extractors plan one uniform group.
Remove when: the extractor plans with ``get_kv_cache_configs`` as ``EngineCore`` does.
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Verdict
from spec_compat.patches.kv_cache_hybrid_groups import engine_planner_probe

CALL = "unify_hybrid_kv_cache_specs"


def probe(module: ModuleType) -> Verdict:
    return engine_planner_probe(module, CALL)


def wrap(original: Any) -> Any:
    def unify_hybrid_kv_cache_specs(kv_cache_spec: dict[str, Any]) -> None:
        # state layers: vLLM's planner keeps them in groups of their own
        with contextlib.suppress(ValueError, NotImplementedError):
            original(kv_cache_spec)

    return unify_hybrid_kv_cache_specs


PATCH = declare(
    __name__,
    target=CALL,
    summary="hybrid (attention + Mamba/linear-attention) models: no forced one-type KV spec",
    requires=("kv_cache_hybrid_groups", "kv_cache_hybrid_plan"),
)
