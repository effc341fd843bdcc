"""Keep the stock extractor's workers on V1 where V2's rows cannot be attributed.

Target: ``vllm_hidden_states_generator.VllmHiddenStatesGenerator.__init__`` (speculators
    0.3.0 and 0.4.x).
Why: Model Runner V2 (vLLM's default for every model from 0.29 where Triton is available;
    ``VLLM_USE_V2_MODEL_RUNNER=1`` forces it earlier) sorts each step's requests and has no
    ``input_batch``: speculators 0.4.x fails in the worker and 0.3.0 returns other prompts'
    states.  ``model_runner_v2_rows`` attributes V2's rows from each step's own batch map
    where V2 has the names it reads; on a release whose V2 has another shape the workers
    must stay on V1.
How: only where V1 is present and V2's batch map is not the one ``model_runner_v2_rows``
    reads, the stock generator's ``__init__`` runs with ``VLLM_USE_V2_MODEL_RUNNER=0``: its
    ``VllmConfig`` validates for V1 and its workers (forked or spawned) inherit the setting;
    the previous value is restored afterwards, so other vLLM engines in the process keep
    their choice.  Elsewhere vLLM's own choice stands (V1 where it is the default, V2 where
    it is or where the user asks for it), and a vLLM without V1 (0.34+) is served by V2.
Upstream change: vLLM 0.22-0.29 ``config/vllm.py`` (``use_v2_model_runner``) and
    ``v1/worker/gpu/model_runner.py``; 0.34 removed V1.
Remove when: no supported vLLM has a V2 runner that ``model_runner_v2_rows`` cannot read.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict
from spec_compat.patches import _model_runner as runners

KNOB = runners.KNOB


def probe(module: ModuleType) -> Verdict:
    if not runners.has_v1():
        return Verdict(Need.NOT_NEEDED, f"no {runners.V1_RUNNER}", "V2 only: model_runner_v2_rows")
    if not runners.has_v2():
        return Verdict(Need.NOT_NEEDED, f"no {runners.V2_RUNNER}", "V1 only")
    served, seen = runners.v2_rows_served()
    if served:
        return Verdict(
            Need.NOT_NEEDED, seen, "V2's rows are attributed (model_runner_v2_rows): vLLM's choice"
        )
    return Verdict(Need.NEEDED, seen, "V2's batch map differs here: the workers stay on V1")


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
    summary="start the workers on V1 where V2's batch map is not one model_runner_v2_rows reads",
)
