"""Import the KV-planning helpers from their new module (an import-time patch).

Target: the ``from vllm.v1.core.kv_cache_utils import _get_kv_cache_groups_uniform_spec,
    get_kv_cache_config_from_groups, unify_hybrid_kv_cache_specs`` statement of
    ``vllm_hidden_states_generator`` (speculators 0.3.0 and 0.4.x).
Why: vLLM 0.33 moved these three helpers to ``vllm.v1.core.kv_cache_planning`` with the same
    signatures and left no alias, so importing the stock extractor raises ``ImportError``.
How: just before the stock module is imported, its source is compiled with that one
    ``from … import`` pointing at ``kv_cache_planning`` (names that stayed, if any, still come
    from ``kv_cache_utils``).  Nothing in vLLM is changed; other importers are unaffected.
    Probe (``ImportPatch.examine``): needed only when ``kv_cache_utils`` lacks the names and
    ``kv_cache_planning`` has them all; any other shape is refused.
Upstream change: vLLM 0.33.0, ``vllm/v1/core/kv_cache_planning.py``.
Remove when: the extractor imports from ``kv_cache_planning`` (or stops planning KV itself).
"""

from __future__ import annotations

from spec_compat.engine.names import GENERATOR
from spec_compat.engine.patch import ImportPatch

PATCH = ImportPatch(
    name="kv_cache_planning_module",
    module=GENERATOR,
    old_module="vllm.v1.core.kv_cache_utils",
    new_module="vllm.v1.core.kv_cache_planning",
    names=(
        "_get_kv_cache_groups_uniform_spec",
        "get_kv_cache_config_from_groups",
        "unify_hybrid_kv_cache_specs",
    ),
    summary="import the KV-planning helpers from kv_cache_planning (moved in 0.33)",
)
