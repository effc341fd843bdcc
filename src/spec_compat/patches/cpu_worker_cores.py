"""Give the stock extractor's CPU workers every core: there is no scheduler process to spare.

Target: ``vllm_hidden_states_generator.MultiprocExecutor`` (speculators 0.3.0 and 0.4.x), CPU
    platform only.
Why: from the 0.2x releases vLLM's CPU workers keep one core per worker back for the engine's
    scheduler process (``utils/ompmultiprocessing.py``: ``reserve_cpu_num =
    local_world_size`` on x86; 0.16 kept none for one worker).  The stock extractor has no
    such process - its driver schedules between blocking RPCs - so that core idles: on a
    2-core machine the extractor ran at 0.65x the pinned release (measured, vLLM 0.32 vs
    0.16, speculators 0.4.0.1), bare prefill on 0.32 at the same 0.65x.
How: while the stock module constructs its executor (which starts the workers and binds
    their threads), ``VLLM_CPU_NUM_OF_RESERVED_CPU`` is ``0``; it is removed again afterwards,
    so other vLLM engines in the process keep vLLM's default.  A value the user set wins.
Upstream change: vLLM's CPU thread binding reserves cores for an engine-core process.
Remove when: the extractor runs inside vLLM's engine (speculators >= 0.5).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict

KNOB = "VLLM_CPU_NUM_OF_RESERVED_CPU"


def probe(module: ModuleType) -> Verdict:
    import vllm.envs

    if KNOB not in getattr(vllm.envs, "environment_variables", {}):
        return Verdict(Need.NOT_NEEDED, f"vLLM has no {KNOB}")
    if KNOB in os.environ:
        return Verdict(Need.NOT_NEEDED, f"{KNOB}={os.environ[KNOB]} set by the user")
    return Verdict(Need.NEEDED, f"{KNOB} unset", "a core per worker idles")


def wrap(original: type) -> type:
    class MultiprocExecutor(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if KNOB in os.environ:
                return super().__init__(*args, **kwargs)
            os.environ[KNOB] = "0"
            try:
                super().__init__(*args, **kwargs)
            finally:
                os.environ.pop(KNOB, None)

    return MultiprocExecutor


PATCH = declare(
    __name__,
    target="MultiprocExecutor",
    summary="CPU platform: the stock extractor's workers get the core vLLM keeps for a scheduler",
    platform="cpu",
)
