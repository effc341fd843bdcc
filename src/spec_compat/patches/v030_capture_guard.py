"""Check at run time that speculators 0.3.0's row slicing matches what was computed.

Target: ``vllm_hidden_states_generator.MultiprocExecutor`` (speculators 0.3.0).
Why: the 0.3.0 driver slices the captured rows by each prompt's full length, in input order.
    That is right only if every scheduled prompt was prefilled whole in its step and the
    worker captured exactly the scheduled tokens; anything else (a chunked prompt, a prompt
    the KV cache could not take, a worker that captured nothing) yields shifted or short
    hidden states with no error.
How: the stock module's ``MultiprocExecutor`` records each step it executes since
    ``_reset_capture``.  A step that continues a prompt or schedules part of a new one
    raises at once; when the states are fetched, the captured row count must equal the
    tokens of all prompts that were scheduled, or the call raises.
Upstream change: none; it guards the stock loop's assumptions (``v030_whole_prompt_prefill``
    makes them true).
Remove when: speculators 0.3.0 is no longer used.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.names import GET_CAPTURED, NON_BLOCK, RESET_CAPTURE
from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict
from spec_compat.engine.stock_source import stock_mentions


class CaptureMisaligned(RuntimeError):
    """The stock 0.3.0 driver would have returned misattributed hidden states."""


def probe(module: ModuleType) -> Verdict:
    if stock_mentions(module, "seq_lens"):
        return Verdict(Need.NEEDED, "captured rows sliced by prompt length", "0.3.0 slicing")
    return Verdict(Need.NOT_NEEDED, "no prompt-length slicing in the stock driver")


def _layers(reply: Any) -> list[Any] | None:
    """The per-layer tensors, from either reply shape (a list of them, or that list wrapped)."""
    if (
        isinstance(reply, list)
        and len(reply) == 1
        and (reply[0] is None or isinstance(reply[0], list))
    ):
        return reply[0]
    return reply


def wrap(original: type) -> type:
    class MultiprocExecutor(original):  # type: ignore[misc, valid-type]
        _spec_compat_rows = 0

        def execute_model(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            for req in scheduler_output.scheduled_new_reqs:
                scheduled = scheduler_output.num_scheduled_tokens[req.req_id]
                if scheduled != len(req.prompt_token_ids):
                    raise CaptureMisaligned(
                        f"request {req.req_id}: {scheduled} of {len(req.prompt_token_ids)} "
                        "prompt tokens scheduled in one step; speculators 0.3.0 would lose "
                        "the rest (is v030_whole_prompt_prefill excluded?)"
                    )
            cached = getattr(scheduler_output, "scheduled_cached_reqs", None)
            if cached is not None and list(getattr(cached, "req_ids", ())):
                raise CaptureMisaligned(
                    f"requests {list(cached.req_ids)} continue from an earlier step; "
                    "speculators 0.3.0 aborts a request after its first step"
                )
            self._spec_compat_rows += scheduler_output.total_num_scheduled_tokens
            return super().execute_model(scheduler_output, *args, **kwargs)

        def collective_rpc(self, method: Any, *args: Any, **kwargs: Any) -> Any:
            if method == RESET_CAPTURE:
                self._spec_compat_rows = 0
            reply = super().collective_rpc(method, *args, **kwargs)
            if method == GET_CAPTURED and not kwargs.get(NON_BLOCK):
                layers = _layers(reply) or []
                rows = {int(t.shape[0]) for t in layers}
                if rows and rows != {self._spec_compat_rows}:
                    raise CaptureMisaligned(
                        f"the worker captured {sorted(rows)} rows per layer but "
                        f"{self._spec_compat_rows} prompt tokens were scheduled"
                    )
            return reply

    return MultiprocExecutor


PATCH = declare(
    __name__,
    target="MultiprocExecutor",
    summary="speculators 0.3.0: raise instead of returning shifted or short hidden states",
    speculators="<0.4",
    after=("shm_transport_driver",),  # counts the rows of tensors, not of descriptors
)
