"""Keep the stock extractor's workers on vLLM's V1 model runner.

Target: ``vllm_hidden_states_generator.VllmHiddenStatesGenerator.__init__`` (speculators
    0.3.0 and 0.4.x).
Why: Model Runner V2 became the default architecture by architecture from vLLM 0.22 and for
    every model from 0.29 (where Triton is available; users can also force it with
    ``VLLM_USE_V2_MODEL_RUNNER=1``).  It has no ``model_runner.input_batch``: speculators
    0.4.x reads ``input_batch.req_id_to_index`` to attribute captured rows (AttributeError),
    and 0.3.0 assumes rows come in arrival order while V2 sorts each batch by token count
    (silently misattributed states).
How: the stock generator's ``__init__`` runs with ``VLLM_USE_V2_MODEL_RUNNER=0``: its
    ``VllmConfig`` validates for V1 and its workers (forked or spawned) inherit the setting;
    the previous value is restored afterwards, so other vLLM engines in the process keep
    their choice.  V1 is present and selectable in every release through 0.33.  vLLM 0.34
    removed V1 (``v1/worker/gpu_model_runner.py``) and the setting: the probe then reports
    unsupported drift, so ``apply()`` and doctor refuse instead of letting 0.3.0 return
    misattributed states (measured on an H200: 1.76 max relative error, no error raised).
Upstream change: vLLM 0.22-0.29 ``config/vllm.py`` (``use_v2_model_runner``) and
    ``v1/worker/gpu/model_runner.py``; 0.34 removed V1.
Remove when: a patch attributes rows in V2's batch order (V2's ``req_states``).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from ..gates import Need, Verdict
from ..patch import declare

KNOB = "VLLM_USE_V2_MODEL_RUNNER"


V1_RUNNER = "vllm.v1.worker.gpu_model_runner"


def probe(module: ModuleType) -> Verdict:
    from importlib.util import find_spec

    import vllm.envs as envs

    if find_spec(V1_RUNNER) is None:
        return Verdict(
            Need.UNKNOWN,
            f"no {V1_RUNNER}: vLLM removed Model Runner V1",
            "the stock code attributes captured rows in V1's batch order; V2 sorts each "
            "batch, so states would be misattributed",
        )
    if KNOB not in getattr(envs, "environment_variables", {}):
        return Verdict(Need.NOT_NEEDED, f"vllm.envs has no {KNOB}: V1 only")
    return Verdict(Need.NEEDED, f"vllm.envs.{KNOB} exists", "the stock worker code needs V1")


def wrap(original: Any) -> Any:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        previous = os.environ.get(KNOB)
        if previous not in (None, "0"):
            import logging

            logging.getLogger(__name__).warning(
                "spec_compat: %s=%s overridden for the extractor", KNOB, previous
            )
        os.environ[KNOB] = "0"
        try:
            original(self, *args, **kwargs)
        finally:
            if previous is None:
                os.environ.pop(KNOB, None)
            else:
                os.environ[KNOB] = previous

    return __init__


PATCH = declare(
    __name__,
    target="VllmHiddenStatesGenerator.__init__",
    summary="start the extractor's workers on the V1 model runner (V2 lacks input_batch)",
)
