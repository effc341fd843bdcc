"""Keep how the stock code built its ``Scheduler``, so that a failed call's can be replaced.

Target: ``vllm_hidden_states_generator.Scheduler`` (speculators 0.3.0 and 0.4.x).
Why: Ctrl-C lands between any two lines of Python, also inside ``Scheduler.schedule()``: a
    request popped from ``waiting`` and appended to ``running`` before its status became
    ``RUNNING`` is one that ``finish_requests`` removes from ``requests`` but not from
    ``running``, and every later call fails (``KeyError: 'req_18_12'`` in
    ``_update_after_schedule``; found by the many-points interrupt test).  No abort mends a
    scheduler whose own state is torn.
How: the stock module's ``Scheduler`` builds the scheduler as before and keeps a
    ``_handoff.SchedulerRebuild`` on it that builds another with the same arguments, through
    the same stack (``scheduler_block_size`` included); ``generate_recovery`` replaces a
    failed call's scheduler with a fresh one and has the workers drop every request the old
    one knew.
Upstream change: none; the stock extractor never recovered from a failed call.
Remove when: the extractor rebuilds its scheduler after a failure.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict
from spec_compat.patches._handoff import SchedulerRebuild


def probe(module: ModuleType) -> Verdict:
    if callable(getattr(module, "Scheduler", None)):
        return Verdict(Need.NEEDED, "Scheduler", "a failed call can tear the scheduler's state")
    return Verdict(Need.UNKNOWN, "no Scheduler", "the stock module no longer builds one")


def wrap(original: Any) -> Any:
    def Scheduler(*args: Any, **kwargs: Any) -> Any:
        rebuild = SchedulerRebuild(lambda: Scheduler(*args, **kwargs))
        return rebuild.keep(original(*args, **kwargs))

    return Scheduler


PATCH = declare(
    __name__,
    target="Scheduler",
    summary="keep how the scheduler was built, so recovery can replace a torn one",
    after=("scheduler_block_size",),  # a rebuilt scheduler gets the engine's block size too
)
