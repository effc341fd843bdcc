"""What one patch hands another at run time: each value a declared, typed object.

A patch that hands a value to another never leaves a bare attribute or dictionary key for
it to find: the value's type lives here, with the one place it is kept, and both patches
use it.  (vLLM's own ``collective_rpc(non_block=...)`` keyword, which one executor patch
sets for those it wraps, is ``names.NON_BLOCK``.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from spec_compat.engine.names import SCHEDULER_REBUILD, STEP_ROWS, WORKER_CHECKS


class WorkerChecks:
    """shm_transport_driver -> generate_checks: per reply of the current ``generate()`` call,
    how many rows the worker's value test failed (None: the worker did not test).  Kept on
    the driver's executor (``names.WORKER_CHECKS``); ``generate_checks`` starts a new one
    for each call when the transport keeps one, and skips its own value pass only when
    every reply was tested and clean."""

    def __init__(self) -> None:
        self.counts: list[int | None] = []

    @staticmethod
    def on(executor: Any) -> WorkerChecks | None:
        """The executor's record, if a transport keeps one."""
        return getattr(executor, WORKER_CHECKS, None)

    @classmethod
    def kept_on(cls, executor: Any) -> WorkerChecks:
        """The transport's side: the executor's record, kept from its first reply on."""
        if (checks := cls.on(executor)) is None:
            setattr(executor, WORKER_CHECKS, checks := cls())
        return checks

    @classmethod
    def restart(cls, executor: Any) -> None:
        """A new ``generate()`` call starts: no reply of it is counted yet."""
        if cls.on(executor) is not None:
            setattr(executor, WORKER_CHECKS, cls())

    @classmethod
    def clean(cls, executor: Any) -> bool:
        """The workers tested every row of this call's replies and found none failing."""
        checks = cls.on(executor)
        return checks is not None and bool(checks.counts) and all(n == 0 for n in checks.counts)


class SchedulerRebuild(NamedTuple):
    """scheduler_rebuild -> generate_recovery: builds a fresh scheduler with the arguments
    the stock code built this one with.  Kept on the scheduler (``names.SCHEDULER_REBUILD``).
    """

    build: Callable[[], Any]

    @staticmethod
    def on(scheduler: Any) -> SchedulerRebuild | None:
        return getattr(scheduler, SCHEDULER_REBUILD, None)

    def keep(self, scheduler: Any) -> Any:
        setattr(scheduler, SCHEDULER_REBUILD, self)
        return scheduler


class StepRowsUnsupported(RuntimeError):
    """A V2 step whose rows the stock row rule cannot describe: refused, never guessed."""


class StepRows:
    """model_runner_v2_rows -> worker_eagle3_capture -> model_runner_v2_rows: the map of the
    step a V2 runner is running, from the runner's own `prepare_inputs` (its `InputBatch`:
    `req_ids[i]` owns rows `query_start_loc_np[i]:[i + 1]`), and the driver's schedule of
    that step (requests in the order its scheduler scheduled them, with their tokens).  The
    capture hands the stock code each step's rows in the scheduler's order (`arrange`); the
    stock 0.4.x bookkeeping reads that order back (`handed`).  Kept on the worker
    (``names.STEP_ROWS``), where the capture finds it through its extension."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.step: tuple[dict[str, int], Any] | None = None  # the prepared step's schedule, map
        self.handed: list[tuple[str, int]] | None = None  # (request, rows) last handed on

    @staticmethod
    def on(holder: Any) -> StepRows | None:
        return getattr(holder, STEP_ROWS, None)

    def keep(self, holder: Any) -> StepRows:
        setattr(holder, STEP_ROWS, self)
        return self

    def record(self, scheduler_output: Any, batch: Any) -> None:
        """`prepare_inputs` returned `batch` for `scheduler_output`: the step about to run."""
        self.step = (dict(scheduler_output.num_scheduled_tokens), batch)

    def arrange(self, states: list[Any], rows: int) -> list[Any]:
        """This step's per-layer states (`rows` rows each, in the runner's batch order),
        reordered into the scheduler's order; refused where the row rule cannot hold."""
        if self.step is None:
            raise StepRowsUnsupported(
                "a forward with no step prepared by the runner (a dummy or profile run while "
                "states are captured): its rows belong to no request"
            )
        scheduled, batch = self.step
        self.step = None
        bounds = [int(b) for b in batch.query_start_loc_np[: len(batch.req_ids) + 1]]
        block = {r: (bounds[i], bounds[i + 1]) for i, r in enumerate(batch.req_ids)}
        where = self._refusal(batch, scheduled, block, rows)
        if where:
            raise StepRowsUnsupported(f"Model Runner V2 step not attributable: {where}")
        self.handed = list(scheduled.items())
        if list(batch.req_ids) == list(scheduled):
            return states
        import torch

        index = torch.cat([torch.arange(*block[r]) for r in scheduled]).to(states[0].device)
        done: dict[int, Any] = {}  # a repeated layer id is one tensor: reorder it once
        return [done.setdefault(id(s), s.index_select(0, index)) for s in states]

    def _refusal(
        self, batch: Any, scheduled: dict[str, int], block: dict[str, tuple[int, int]], rows: int
    ) -> str:
        if batch.num_draft_tokens:
            return f"{batch.num_draft_tokens} draft tokens in the step"
        if getattr(self.runner, "pcp_manager", None) is not None:
            return "prefill context parallelism partitions each request's rows"
        if batch.num_tokens_after_padding != batch.num_tokens:
            return (
                f"{batch.num_tokens_after_padding - batch.num_tokens} padding rows after "
                f"{batch.num_tokens} tokens (CUDA graphs or data parallelism)"
            )
        if rows != batch.num_tokens:
            return f"{rows} captured rows for a step of {batch.num_tokens} tokens"
        counts = {r: end - start for r, (start, end) in block.items()}
        if counts != scheduled:
            return f"the batch's rows per request {counts} differ from the schedule {scheduled}"
        return ""
