"""Prefill every prompt in one step, so speculators 0.3.0 never truncates or shifts states.

Target: ``vllm_hidden_states_generator.SchedulerConfig`` (speculators 0.3.0).
Why: when one step's prompts exceed ``max_num_batched_tokens`` vLLM prefills the last one
    partly and continues it next step.  The 0.3.0 loop aborts every request right after the
    step that scheduled it, so that prompt never finishes, and the driver slices the captured
    rows by full prompt lengths: every later prompt is shifted, the last come out short, and
    nothing raises (seen on vLLM 0.16 with 40 prompts of 2-1,000 tokens).
How: the stock module's ``SchedulerConfig`` passes ``enable_chunked_prefill=False``.  vLLM then
    schedules a prompt only when all of it fits the step's budget (the stock budget is at
    least ``max_model_len`` and prompts are cut below it), in arrival order, so each step
    holds whole prompts and the captured rows follow the input order the driver assumes.
    ``v030_capture_guard`` checks exactly that at run time.
Upstream change: none: chunked prefill has been vLLM's default throughout; the bug is in the
    0.3.0 loop (0.4.x tracks per-request token counts instead).
Remove when: speculators 0.3.0 is no longer used.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict, signature_text
from spec_compat.patches._stock import config_field, with_kwargs

FIELD = "enable_chunked_prefill"


def probe(module: ModuleType) -> Verdict:
    from vllm.config import SchedulerConfig

    verdict, _ = config_field(module, "SchedulerConfig", SchedulerConfig, FIELD)
    if verdict is not None:
        return verdict
    found = signature_text(SchedulerConfig)
    return Verdict(Need.NEEDED, found, "the 0.3.0 loop cannot resume a partly prefilled prompt")


def wrap(original: Any) -> Any:
    return with_kwargs(original, lambda kw: kw.setdefault(FIELD, False))


PATCH = declare(
    __name__,
    target="SchedulerConfig",
    summary="speculators 0.3.0: no chunked prefill (partly prefilled prompts were lost)",
    speculators="<0.4",
)
