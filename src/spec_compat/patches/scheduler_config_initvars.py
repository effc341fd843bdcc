"""Pass the ``SchedulerConfig`` init-vars that became required.

Target: ``vllm_hidden_states_generator.SchedulerConfig`` (speculators 0.3.0).
Why: vLLM 0.12 made ``max_model_len`` and ``is_encoder_decoder`` required ``InitVar``s; the
    stock 0.3.0 call omits ``is_encoder_decoder`` and fails before any model loads.
How: the stock module's ``SchedulerConfig`` adds ``is_encoder_decoder=False`` (these are
    decoder-only extractors) when the installed signature requires it.
Upstream change: vLLM 0.11.1 added both with defaults; 0.12.0 removed the defaults
    (``config/scheduler.py``).
Remove when: the extractor passes ``is_encoder_decoder`` (speculators 0.4.x does).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Verdict, binding_probe, missing_and_unexpected
from spec_compat.patches._stock import parameters, with_kwargs

DEFAULTS = {"is_encoder_decoder": False}


def _installed() -> Any:
    from vllm.config import SchedulerConfig

    return SchedulerConfig


def probe(module: ModuleType) -> Verdict:
    def fixable(call, params) -> bool:
        missing, unexpected = missing_and_unexpected(call, params)
        return not unexpected and missing <= set(DEFAULTS)

    return binding_probe(module, "SchedulerConfig", _installed(), fixable)


def wrap(original: Any) -> Any:
    accepted = parameters(original)

    def adjust(kwargs: dict[str, Any]) -> None:
        for name, value in DEFAULTS.items():
            if name in accepted:
                kwargs.setdefault(name, value)

    return with_kwargs(original, adjust)


PATCH = declare(
    __name__,
    fixes=("SchedulerConfig",),
    target="SchedulerConfig",
    summary="pass is_encoder_decoder=False, now a required SchedulerConfig init-var",
)
