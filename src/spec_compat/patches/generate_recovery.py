"""Leave the generator serving after a failed or interrupted ``generate()`` call.

Target: ``vllm_hidden_states_generator.VllmHiddenStatesGenerator.generate`` (both lines).
Why: the stock ``generate`` adds every prompt to its scheduler and aborts them only at the
    end of a call that succeeds.  A call that fails midway (an exception in a step, a
    ``KeyboardInterrupt`` the caller catches, ``MemoryError`` from a full ``/dev/shm``)
    leaves its requests in the scheduler holding KV blocks; later calls schedule them
    beside their own and fail ("Request req_4_24 not found in captured states"), so a
    long data run that catches errors must rebuild the engine.
How: ``generate`` is wrapped; when the call raises anything, the scheduler is replaced
    with a fresh one built as the stock code built it (``scheduler_rebuild``: the call may
    have torn its state) whose next step tells the workers to drop every request the old
    one knew (without ``scheduler_rebuild``, every request it holds is finished as aborted),
    a step whose first phase ran without its ``sample_tokens`` (Ctrl-C between the
    two) is finished with ``sample_tokens(None)``, as ``EngineCore.step`` would (a no-op on
    a worker with no step open; without it the next step fails: "sample_tokens() must be
    called after execute_model() returns None"), and the workers' capture state is reset
    through the stock ``_reset_capture`` (which also frees the failed call's shared memory
    at once) before the exception goes on unchanged.  Workers that died are left alone
    (``executor_rpc_in_step`` says the engine must be rebuilt).
Upstream change: none; the stock extractor never cleaned up after a failed call.
Remove when: the extractor aborts its requests on failure.
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

from spec_compat.engine.names import GENERATOR, RESET_CAPTURE
from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict
from spec_compat.patches._handoff import SchedulerRebuild


def renew_scheduler(generator: Any, aborted: Any) -> None:
    old = getattr(generator, "scheduler", None)
    rebuild = SchedulerRebuild.on(old)
    if rebuild is None:  # scheduler_rebuild not selected: abort what the scheduler holds
        if live := list(getattr(old, "requests", None) or ()):
            old.finish_requests(live, aborted)
        return
    known = set(old.requests) | set(old.finished_req_ids)
    for queue in (old.running, old.waiting):
        known.update(request.request_id for request in queue)
    fresh = rebuild.build()
    fresh.finished_req_ids.update(known)  # sent with the next step: the workers drop them
    generator.scheduler = fresh
    with contextlib.suppress(Exception):
        old.shutdown()


def reset_workers(generator: Any) -> None:
    executor = getattr(generator, "executor", None)
    if executor is None or getattr(executor, "is_failed", False):
        return
    with contextlib.suppress(Exception):  # the call's own error is the one to tell
        if hasattr(executor, "sample_tokens"):  # two-phase steps (vLLM 0.11.1+)
            executor.sample_tokens(None)
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
            renew_scheduler(self, aborted)
            reset_workers(self)
            raise

    return generate


PATCH = declare(
    __name__,
    target="VllmHiddenStatesGenerator.generate",
    summary="free a failed or interrupted call's requests, so the next call works",
    after=("generate_checks", "v04_batches_of_max_num_seqs"),  # it sees every failure
)
