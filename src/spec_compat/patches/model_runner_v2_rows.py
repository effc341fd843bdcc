"""Attribute each captured row to its request on vLLM's Model Runner V2.

Target: ``custom_worker.HiddenStatesWorkerExtension`` (speculators 0.3.0 and 0.4.x), in every
    vLLM worker.
Why: V2 (vLLM's default for every model from 0.29 where Triton is available, the only
    runner from 0.34) sorts each step's requests (drafts first, then decodes, then by
    ascending token count) and has no ``model_runner.input_batch``.  speculators 0.4.x reads
    ``input_batch.req_id_to_index`` to order its metadata (AttributeError in the worker);
    0.3.0 slices the rows in the order it scheduled its prompts and gets other prompts'
    states, with no error (H200, vLLM 0.34: 1.76 max relative error).  V2's
    ``req_states.req_id_to_index`` is a slot index, not the batch order: read as one, it
    gives wrong rows silently.
How: on a V2 runner the worker records the map of each step from the runner's own
    ``prepare_inputs`` (its ``InputBatch``: ``req_ids[i]`` owns rows
    ``query_start_loc_np[i]:[i + 1]``, on the extractor's runner instance only) with the
    order the driver's scheduler scheduled those requests (``_handoff.StepRows``).  The
    capture hands the stock code each step's rows in that scheduler order, the order V1
    gave both lines (0.3.0's arrival-order slicing then holds); the 0.4.x bookkeeping runs
    with that order in place of V1's ``input_batch``, and every request of the step must
    be announced with exactly its rows.  A step the rule cannot describe (draft tokens,
    prefill context parallelism, padding rows, a forward no step was prepared for) raises
    ``StepRowsUnsupported`` before any of its states is stored.  V1 runners are untouched.
Upstream change: vLLM 0.29 ``config/vllm.py`` (``use_v2_model_runner`` on by default),
    ``v1/worker/gpu/model_runner.py`` (``sort_batch_req_ids``); 0.34 removed V1.
Remove when: speculators 0.3.0 and 0.4.x are no longer used (0.5+ uses vLLM's own
    ``extract_hidden_states``).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.names import SET_METADATA, STORE_CAPTURED, WORKER
from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict
from spec_compat.engine.stock_source import stock_mentions
from spec_compat.patches import _model_runner as runners
from spec_compat.patches._handoff import StepRows, StepRowsUnsupported

#: what the stock 0.4.x bookkeeping orders its metadata by (V1 only)
V1_ORDER = "input_batch.req_id_to_index"


def probe(module: ModuleType) -> Verdict:
    extension = getattr(module, "HiddenStatesWorkerExtension", None)
    if not hasattr(extension, STORE_CAPTURED):
        return Verdict(Need.UNKNOWN, f"HiddenStatesWorkerExtension lacks {STORE_CAPTURED}")
    if not runners.has_v2():
        return Verdict(Need.NOT_NEEDED, f"no {runners.V2_RUNNER}", "V1 only")
    served, seen = runners.v2_rows_served()
    if not served:
        if runners.has_v1():
            return Verdict(
                Need.NOT_NEEDED, seen, "V2's batch map differs here: model_runner_v1 keeps V1"
            )
        return Verdict(Need.UNKNOWN, seen, "V2 is the only runner and its batch map changed")
    if hasattr(extension, SET_METADATA) and not stock_mentions(module, V1_ORDER):
        return Verdict(Need.UNKNOWN, seen, f"the stock 0.4.x bookkeeping lacks {V1_ORDER}")
    return Verdict(
        Need.NEEDED, seen, "V2 sorts each step; the stock code attributes rows in V1's order"
    )


def record_steps(runner: Any, rows: StepRows) -> None:
    """The runner's own `prepare_inputs`, recording the map of each step it prepares (an
    attribute of this runner instance: no other engine sees it)."""
    prepare = runner.prepare_inputs

    def prepare_inputs(scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        batch = prepare(scheduler_output, *args, **kwargs)
        rows.record(scheduler_output, batch)
        return batch

    runner.prepare_inputs = prepare_inputs


def wrap(original: type) -> type:
    by_request = hasattr(original, SET_METADATA)  # speculators 0.4.x

    class HiddenStatesWorkerExtension(original):  # type: ignore[misc, valid-type]
        def _setup_hidden_states_capture(self, layer_ids: list[int]) -> Any:
            result = super()._setup_hidden_states_capture(layer_ids)
            runner = self.model_runner
            if runners.is_v2(runner) and StepRows.on(self) is None:
                record_steps(runner, StepRows(runner).keep(self))
            return result

        def _reset_capture(self) -> Any:
            if (rows := StepRows.on(self)) is not None:
                rows.step = rows.handed = None  # what a failed call left
            return super()._reset_capture()

        def _store_captured_states(self, aux_hidden_states: list[Any]) -> Any:
            rows = StepRows.on(self)
            if rows is None:  # a V1 runner
                return super()._store_captured_states(aux_hidden_states)
            handed, rows.handed = rows.handed, None
            if handed is None:
                raise StepRowsUnsupported(
                    "Model Runner V2: these rows were not put in the scheduler's order (the "
                    "stock decoder loop ran: is worker_eagle3_capture excluded?)"
                )
            if not by_request:  # 0.3.0 slices in the order the rows now come in
                return super()._store_captured_states(aux_hidden_states)
            return store_by_request(self, aux_hidden_states, handed)

    return HiddenStatesWorkerExtension


def store_by_request(worker: Any, states: list[Any], handed: list[tuple[str, int]]) -> None:
    """The stock 0.4.x ``_store_captured_states``, with the order the rows were handed in
    for V1's ``input_batch`` order; each request of the step announced with its rows."""
    if worker._captured_states is None:
        worker._captured_states = [[h] for h in states]
    else:
        for i, h in enumerate(states):
            worker._captured_states[i].append(h)
    metadata = getattr(worker, "_current_request_metadata", None)
    if metadata is None:
        return
    if dict(metadata) != dict(handed):
        raise StepRowsUnsupported(
            f"Model Runner V2 step of rows per request {dict(handed)}, announced by the "
            f"driver as {dict(metadata)}: rows the stock 0.4.x slicing would misattribute"
        )
    position = {req_id: i for i, (req_id, _) in enumerate(handed)}
    worker._request_metadata.append(sorted(metadata.items(), key=lambda kv: position[kv[0]]))


PATCH = declare(
    __name__,
    side="worker",
    module=WORKER,
    target="HiddenStatesWorkerExtension",
    summary="worker: attribute rows on Model Runner V2 from each step's own batch map",
    after=("worker_eagle3_capture",),  # subclasses the class whose set-up the capture replaced
    before=("shm_transport_worker",),  # the transport stores what this bookkeeping orders
)
