"""Leave the generator serving after a failed or interrupted ``generate()`` call.

Target: ``vllm_hidden_states_generator.VllmHiddenStatesGenerator.generate`` (both lines).
Why: the stock ``generate`` adds every prompt to its scheduler and aborts them only at the
    end of a call that succeeds.  A call that fails midway (an exception in a step, a
    ``KeyboardInterrupt`` the caller catches, ``MemoryError`` from a full ``/dev/shm``)
    leaves its requests in the scheduler holding KV blocks; later calls schedule them
    beside their own and fail ("Request req_4_24 not found in captured states"), so a
    long data run that catches errors must rebuild the engine.
How: ``generate`` is wrapped; when the call raises anything, every request the scheduler
    still holds is finished as aborted (its blocks freed; the workers drop it at the next
    step) and the workers' capture state is reset through the stock ``_reset_capture``
    (which also frees the failed call's shared memory at once) before the exception goes
    on unchanged.  Workers that died are left alone (``executor_rpc_in_step`` says the
    engine must be rebuilt).
Upstream change: none; the stock extractor never cleaned up after a failed call.
Remove when: the extractor aborts its requests on failure.
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

from ..gates import Need, Verdict
from ..names import GENERATOR, RESET_CAPTURE
from ..patch import Patch


def release_requests(generator: Any, aborted: Any) -> None:
    scheduler = getattr(generator, "scheduler", None)
    live = list(getattr(scheduler, "requests", None) or ())
    if live:
        scheduler.finish_requests(live, aborted)


def reset_workers(generator: Any) -> None:
    executor = getattr(generator, "executor", None)
    if executor is None or getattr(executor, "is_failed", False):
        return
    with contextlib.suppress(Exception):  # the call's own error is the one to tell
        executor.collective_rpc(RESET_CAPTURE)


def probe(module: ModuleType) -> Verdict:
    found = "Scheduler.finish_requests, RequestStatus.FINISHED_ABORTED"
    status = getattr(module, "RequestStatus", None)
    if hasattr(getattr(module, "Scheduler", None), "finish_requests") and hasattr(
        status, "FINISHED_ABORTED"
    ):
        return Verdict(Need.NEEDED, found, "a failed call leaves its requests scheduled")
    return Verdict(Need.UNKNOWN, f"lacks {found}", "the stock scheduler use changed")


def wrap(original: Any) -> Any:
    import sys

    aborted = sys.modules[GENERATOR].RequestStatus.FINISHED_ABORTED

    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, *args, **kwargs)
        except BaseException:
            release_requests(self, aborted)
            reset_workers(self)
            raise

    return generate


PATCH = Patch(
    name="generate_recovery",
    side="driver",
    module=GENERATOR,
    target="VllmHiddenStatesGenerator.generate",
    summary="free a failed or interrupted call's requests, so the next call works",
    probe=probe,
    wrap=wrap,
    after=("generate_checks", "v04_batches_of_max_num_seqs"),  # it sees every failure
)
