"""Fast tests of the Model Runner V2 row attribution (`_handoff.StepRows`) and of how
`model_runner_v1` / `model_runner_v2_rows` decide; the real V2 runs are in
e2e/test_model_runner_v2.py."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from spec_compat.patches import _model_runner as runners
from spec_compat.patches import model_runner_v1, model_runner_v2_rows
from spec_compat.patches._handoff import StepRows, StepRowsUnsupported
from spec_compat.patches.model_runner_v2_rows import store_by_request

torch = pytest.importorskip("torch")


def step(scheduled: dict[str, int], batch_order: list[str], **batch):
    """A scheduler output and the runner's batch for it, rows in `batch_order`."""
    counts = [scheduled[r] for r in batch_order]
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    total = int(bounds[-1])
    fields = {
        "req_ids": batch_order, "query_start_loc_np": bounds, "num_tokens": total,
        "num_tokens_after_padding": total, "num_draft_tokens": 0,
    } | batch  # fmt: skip
    return SimpleNamespace(num_scheduled_tokens=scheduled), SimpleNamespace(**fields)


def rows_of(order: list[str], scheduled: dict[str, int]):
    """One layer's states: each row holds its request's number (a, b, c -> 0, 1, 2)."""
    return torch.cat([torch.full((scheduled[r], 2), float(ord(r) - 97)) for r in order])


def test_rows_come_back_in_the_scheduler_order():
    scheduled = {"a": 3, "b": 1, "c": 2}  # the order the driver scheduled them
    rows = StepRows(SimpleNamespace(pcp_manager=None))
    rows.record(*step(scheduled, ["b", "c", "a"]))  # V2: the 1-token query first, then by length
    layer = rows_of(["b", "c", "a"], scheduled)
    arranged, repeat = rows.arrange([layer, layer], 6)
    assert arranged.equal(rows_of(["a", "b", "c"], scheduled))
    assert repeat is arranged  # a repeated layer id: reordered once, still one tensor
    assert rows.handed == [("a", 3), ("b", 1), ("c", 2)]


def test_a_step_in_the_scheduler_order_is_handed_on_as_it_is():
    scheduled = {"a": 2, "b": 2}
    rows = StepRows(SimpleNamespace(pcp_manager=None))
    rows.record(*step(scheduled, ["a", "b"]))
    layer = rows_of(["a", "b"], scheduled)
    assert rows.arrange([layer], 4)[0] is layer


@pytest.mark.parametrize(
    ("edit", "runner", "rows", "message"),
    [
        ({"num_draft_tokens": 2}, None, 4, "2 draft tokens"),
        ({"num_tokens_after_padding": 8}, None, 4, "4 padding rows"),
        ({}, object(), 4, "context parallelism"),
        ({}, None, 5, "5 captured rows for a step of 4 tokens"),
        ({"query_start_loc_np": np.array([0, 1, 4])}, None, 4, "differ from the schedule"),
    ],
)
def test_steps_the_row_rule_cannot_describe_are_refused(edit, runner, rows, message):
    step_rows = StepRows(SimpleNamespace(pcp_manager=runner))
    step_rows.record(*step({"a": 2, "b": 2}, ["b", "a"], **edit))
    with pytest.raises(StepRowsUnsupported, match=message):
        step_rows.arrange([torch.zeros(rows, 2)], rows)
    assert step_rows.handed is None  # nothing was handed on


def test_a_forward_with_no_prepared_step_is_refused():
    rows = StepRows(SimpleNamespace(pcp_manager=None))
    scheduled = {"a": 1}
    rows.record(*step(scheduled, ["a"]))
    rows.arrange([torch.zeros(1, 2)], 1)
    with pytest.raises(StepRowsUnsupported, match="no step prepared"):
        rows.arrange([torch.zeros(1, 2)], 1)  # a second forward for the same step


def test_the_04_bookkeeping_orders_metadata_as_the_rows_were_handed():
    worker = SimpleNamespace(_captured_states=None, _request_metadata=[])
    worker._current_request_metadata = {"b": 1, "a": 3}
    store_by_request(worker, [torch.zeros(4, 2)], [("a", 3), ("b", 1)])
    assert worker._request_metadata == [[("a", 3), ("b", 1)]]
    worker._current_request_metadata = {"a": 2, "b": 1}  # announced rows differ from the step's
    with pytest.raises(StepRowsUnsupported, match="misattribute"):
        store_by_request(worker, [torch.zeros(4, 2)], [("a", 3), ("b", 1)])


@pytest.mark.parametrize(
    ("v1", "v2", "served", "v1_need", "v2_need"),
    [
        (True, False, False, "NOT_NEEDED", "NOT_NEEDED"),  # V1 only
        (True, True, True, "NOT_NEEDED", "NEEDED"),  # both, V2 attributable: vLLM's choice
        (True, True, False, "NEEDED", "NOT_NEEDED"),  # both, V2 of another shape: force V1
        (False, True, True, "NOT_NEEDED", "NEEDED"),  # V2 only (0.34+)
        (False, True, False, "NOT_NEEDED", "UNKNOWN"),  # V2 only, of another shape: refused
    ],
)
def test_which_runner_patch_applies(monkeypatch, v1, v2, served, v1_need, v2_need):
    monkeypatch.setattr(runners, "has_v1", lambda: v1)
    monkeypatch.setattr(runners, "has_v2", lambda: v2)
    monkeypatch.setattr(runners, "v2_rows_served", lambda: (served, "seen"))
    extension = type("E", (), {"_store_captured_states": 0})
    stock = SimpleNamespace(HiddenStatesWorkerExtension=extension)
    assert model_runner_v1.probe(stock).need.name == v1_need
    assert model_runner_v2_rows.probe(stock).need.name == v2_need


def test_a_v2_runner_is_told_from_its_class_alone():
    v2 = type("GPUModelRunner", (), {"__module__": runners.V2_RUNNER})
    platform = type("CPUModelRunner", (v2,), {"__module__": "vllm.v1.worker.cpu.model_runner"})
    v1 = type("GPUModelRunner", (), {"__module__": runners.V1_RUNNER})
    assert runners.is_v2(platform()) and runners.is_v2(v2())
    assert not runners.is_v2(v1()) and not runners.is_v2(None)
