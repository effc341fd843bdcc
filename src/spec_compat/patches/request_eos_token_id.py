"""Move ``Request(eos_token_id=…)`` into the sampling parameters.

Target: ``vllm_hidden_states_generator.Request`` (speculators 0.3.0 and 0.4.x).
Why: vLLM 0.17 removed the ``eos_token_id`` parameter of ``Request`` (the EOS now lives in
    ``SamplingParams``); both stock extractors pass it and raise ``TypeError``.
How: when the installed ``Request`` does not accept it, the stock module's ``Request`` pops
    the keyword and sets it with ``SamplingParams.update_from_generation_config`` (what the
    input processor does), so the EOS id still reaches the request.
Upstream change: vLLM 0.17.0 ``v1/request.py``; 0.18 removed the deprecated property.
Remove when: the extractor stops passing ``eos_token_id``.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Verdict, binding_probe, missing_and_unexpected
from spec_compat.patches._stock import parameters

MOVED = "eos_token_id"


def _installed() -> Any:
    from vllm.v1.request import Request

    return Request


def probe(module: ModuleType) -> Verdict:
    def fixable(call, params) -> bool:
        missing, unexpected = missing_and_unexpected(call, params)
        return not missing and unexpected == {MOVED} and "sampling_params" in call.keywords

    return binding_probe(module, "Request", _installed(), fixable)


def wrap(original: Any) -> Any:
    accepted = parameters(original)

    def Request(*args: Any, **kwargs: Any) -> Any:
        if MOVED not in accepted and MOVED in kwargs:
            eos = kwargs.pop(MOVED)
            params = kwargs.get("sampling_params")
            if eos is not None and params is not None:
                params.update_from_generation_config({}, eos_token_id=eos)
        return original(*args, **kwargs)

    return Request


PATCH = declare(
    __name__,
    fixes=("Request",),
    target="Request",
    summary="move Request(eos_token_id=) into SamplingParams (removed in 0.17)",
)
