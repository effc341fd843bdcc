"""Send the workers the requests finished in a call's last step.

Target: ``vllm_hidden_states_generator.Scheduler`` (speculators 0.3.0 and 0.4.x).
Why: the workers learn which requests finished from the next step's
    ``scheduler_output.finished_req_ids``.  The stock loop stops at the first schedule with
    no tokens and never executes it, so the requests finished in a call's last step never
    reach the workers (vLLM's engine core executes that output too).  speculators 0.3.0
    finishes every request after its step, so each call leaves its last step's requests
    behind in every worker: held for good by V1 (a worker's memory grows with every call of
    a data run) and, on Model Runner V2, in request slots that run out (``No free
    indices`` after about ``max_num_seqs`` requests, e.g. a 300-prompt call after a few
    small ones).
How: the stock module's ``Scheduler`` builds the scheduler as before; a schedule with no
    tokens, which the stock loop never executes, hands its finished requests back to the
    scheduler, so they go with the next step that runs (the next call's first).
Upstream change: none; the stock loop never ran vLLM's empty step.
Remove when: the extractor executes every schedule, or drives vLLM's engine core.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict


def probe(module: ModuleType) -> Verdict:
    scheduler = getattr(module, "Scheduler", None)
    if isinstance(scheduler, type) and hasattr(scheduler, "schedule"):
        return Verdict(Need.NEEDED, "Scheduler.schedule", "the stock loop drops the empty step")
    return Verdict(Need.UNKNOWN, f"Scheduler: {scheduler!r}", "the stock scheduler changed")


def wrap(original: Any) -> Any:
    def Scheduler(*args: Any, **kwargs: Any) -> Any:
        scheduler = original(*args, **kwargs)
        stock_schedule = scheduler.schedule

        def schedule(*a: Any, **kw: Any) -> Any:
            output = stock_schedule(*a, **kw)
            finished = getattr(output, "finished_req_ids", None)
            if output.total_num_scheduled_tokens == 0 and finished:
                scheduler.finished_req_ids |= set(finished)  # a step that never runs
            return output

        scheduler.schedule = schedule  # this scheduler only: other engines keep vLLM's
        return scheduler

    return Scheduler


PATCH = declare(
    __name__,
    target="Scheduler",
    summary="send the workers the requests finished in a call's last step (never executed)",
    after=("scheduler_block_size",),
    before=("scheduler_rebuild",),  # a rebuilt scheduler keeps them too
)
