"""What one patch hands another at run time: each value a declared, typed object.

A patch that hands a value to another never leaves a bare attribute or dictionary key for
it to find: the value's type lives here, with the one place it is kept, and both patches
use it.  (vLLM's own ``collective_rpc(non_block=...)`` keyword, which one executor patch
sets for those it wraps, is ``names.NON_BLOCK``.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from ..names import SCHEDULER_REBUILD, WORKER_CHECKS


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
