"""Drop ``kv_cache_specs=`` from ``get_kv_cache_config_from_groups``.

Target: ``vllm_hidden_states_generator.get_kv_cache_config_from_groups`` (speculators 0.3.0).
Why: vLLM 0.12 removed the ``kv_cache_specs`` parameter (the groups carry the specs); the
    stock 0.3.0 call passes it and raises ``TypeError``.
How: the stock module's name points at an adapter that removes the keyword when the installed
    function does not accept it.
Upstream change: vLLM 0.12.0, ``v1/core/kv_cache_utils.py``:
    ``(vllm_config, kv_cache_groups, available_memory)``.
Remove when: the extractor stops passing ``kv_cache_specs`` (speculators 0.4.x).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Verdict, binding_probe, first_attr, missing_and_unexpected
from spec_compat.patches._stock import parameters, with_kwargs

CALL = "get_kv_cache_config_from_groups"
DROPPED = "kv_cache_specs"


def _installed() -> Any:
    return first_attr(
        [f"vllm.v1.core.kv_cache_planning:{CALL}", f"vllm.v1.core.kv_cache_utils:{CALL}"]
    )


def probe(module: ModuleType) -> Verdict:
    def fixable(call, params) -> bool:
        missing, unexpected = missing_and_unexpected(call, params)
        return not missing and unexpected == {DROPPED}

    return binding_probe(module, CALL, _installed(), fixable)


def wrap(original: Any) -> Any:
    accepted = parameters(original)

    def adjust(kwargs: dict[str, Any]) -> None:
        if DROPPED not in accepted:
            kwargs.pop(DROPPED, None)

    return with_kwargs(original, adjust)


PATCH = declare(
    __name__,
    fixes=("get_kv_cache_config_from_groups",),
    target=CALL,
    summary="stop passing kv_cache_specs= to get_kv_cache_config_from_groups",
)
