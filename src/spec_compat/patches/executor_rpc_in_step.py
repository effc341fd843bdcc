"""Keep the driver and the workers in step through a Ctrl-C, and say when a worker died.

Target: ``vllm_hidden_states_generator.MultiprocExecutor`` (speculators 0.3.0 and 0.4.x).
Why: ``collective_rpc`` sends a request to the workers and then waits for their replies.
    A ``KeyboardInterrupt`` during that wait (where a Ctrl-C almost always lands: the
    driver spends its time waiting on the workers) abandons the reply in the response
    queue, and every later RPC reads the reply meant for the one before it: the generator
    is out of step for good, even after ``generate_recovery`` freed the call's requests.
    A worker process that died makes vLLM fail every later call with "Executor failed.",
    which does not say that the generator cannot recover.
How: the stock module's ``MultiprocExecutor`` is a subclass whose ``collective_rpc``, on
    the main thread and while SIGINT has Python's default handler, holds a Ctrl-C until
    the reply is in, then raises the ``KeyboardInterrupt`` (the call fails cleanly and
    ``generate_recovery`` frees it; the next call is exact).  A second Ctrl-C during the
    same wait raises at once and marks the executor out of step, so that the next RPC
    refuses instead of reading a stale reply.  When vLLM marked the executor failed (a
    worker died), the error says so and that the generator must be rebuilt.
Upstream change: none; vLLM's engine core never lets a signal interrupt an RPC wait.
Remove when: the extractor runs on vLLM's engine core rather than driving the executor.
"""

from __future__ import annotations

import signal
import threading
from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict, signature_text

REBUILD = "build a new VllmHiddenStatesGenerator (this one cannot serve another call)"


class WorkerLost(RuntimeError):
    """The workers cannot answer this generator any more."""

    @classmethod
    def died(cls) -> WorkerLost:
        return cls(f"spec_compat: a vLLM worker process died; {REBUILD}")


def probe(module: ModuleType) -> Verdict:
    executor = getattr(module, "MultiprocExecutor", None)
    if executor is None or not hasattr(executor, "collective_rpc"):
        return Verdict(Need.UNKNOWN, "no MultiprocExecutor.collective_rpc", "the RPC changed")
    found = signature_text(executor.collective_rpc)
    return Verdict(Need.NEEDED, found, "a Ctrl-C in the wait leaves the reply queued")


def wrap(original: type) -> type:
    class MultiprocExecutor(original):  # type: ignore[misc, valid-type]
        _spec_compat_out_of_step = False

        def collective_rpc(self, *args: Any, **kwargs: Any) -> Any:
            if self._spec_compat_out_of_step:
                raise WorkerLost(
                    "spec_compat: a second Ctrl-C abandoned a reply from the workers, so "
                    f"their replies no longer match the requests; {REBUILD}"
                )
            if getattr(self, "is_failed", False):
                raise WorkerLost.died()
            if (
                threading.current_thread() is not threading.main_thread()
                or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
            ):
                return self._spec_compat_rpc(*args, **kwargs)
            held: list[int] = []

            def hold(signum: int, frame: Any) -> None:
                if held:  # the user insists: give up the reply, and say so next time
                    self._spec_compat_out_of_step = True
                    raise KeyboardInterrupt
                held.append(signum)

            signal.signal(signal.SIGINT, hold)
            try:
                reply = self._spec_compat_rpc(*args, **kwargs)
            except Exception as exc:
                if held:  # e.g. the workers got the Ctrl-C too (a terminal's) and stopped
                    raise KeyboardInterrupt(f"then the RPC failed: {exc}") from exc
                raise
            finally:
                signal.signal(signal.SIGINT, signal.default_int_handler)
            if held:
                raise KeyboardInterrupt("raised once the workers' reply was in")
            return reply

        def _spec_compat_rpc(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().collective_rpc(*args, **kwargs)
            except Exception as exc:
                if getattr(self, "is_failed", False):
                    raise WorkerLost.died() from exc
                raise

    return MultiprocExecutor


PATCH = declare(
    __name__,
    target="MultiprocExecutor",
    summary="hold a Ctrl-C until the workers' reply is in; say when a worker died",
    after=("executor_pipelined_steps",),  # a Ctrl-C also waits for the pipelined replies
)
