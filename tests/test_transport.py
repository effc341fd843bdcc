"""The shared-memory transport's parts, on real shared memory and CPU tensors (the E2E
proof against the stock path is tests/e2e/test_transport.py)."""

from __future__ import annotations

import glob
import os
import pickle

import pytest

torch = pytest.importorskip("torch")

from spec_compat.patches._row_checks import bad_row_flags  # noqa: E402
from spec_compat.patches._row_matching import RowMatcher  # noqa: E402
from spec_compat.transport import (  # noqa: E402
    Attachments,
    CallStore,
    Copier,
    SegmentPool,
    ShmFull,
    handed_over_class,
)


def stock_grouping(steps_rows, steps_meta):
    """speculators 0.4.0.1's `_get_captured_states`, verbatim in effect: one cursor over all
    steps' rows, concatenated."""
    rows = torch.cat(steps_rows)
    out, cursor = {}, 0
    for step in steps_meta:
        for req_id, count in step:
            out.setdefault(req_id, []).append(rows[cursor : cursor + count])
            cursor += count
    return {req_id: torch.cat(chunks) for req_id, chunks in out.items()}


def replay(steps_rows, steps_meta):
    matcher, got = RowMatcher(), {}
    for rows, meta in zip(steps_rows, steps_meta, strict=True):
        pieces, _ = matcher.feed([rows], [meta])
        for req_id, source, first, count in pieces:
            got.setdefault(req_id, []).extend(t[first : first + count] for t in source or [])
    for req_id in matcher.unmet():
        got.setdefault(req_id, [])
    return {k: torch.cat(v) if v else torch.empty(0, 2) for k, v in got.items()}


@pytest.mark.parametrize(
    "meta",
    [
        [[("a", 3), ("b", 2)], [("b", 1), ("c", 4)]],  # b split over two steps
        [[("a", 2)], [("a", 3), ("b", 2)]],  # the stock cursor runs ahead of step 0's rows
        [[("a", 6)], [("b", 3)]],  # and behind: a claims rows of step 1
        [[("a", 5)], [("b", 5), ("c", 1)]],  # c is owed rows that never come
    ],
)
def test_row_matcher_replays_the_stock_cursor(meta):
    steps = [torch.arange(10.0).view(5, 2), torch.arange(10.0, 20.0).view(5, 2)]
    want, got = stock_grouping(steps, meta), replay(steps, meta)
    assert want.keys() == got.keys()
    for req_id in want:
        assert torch.equal(want[req_id], got[req_id]), req_id


def segments():
    return set(glob.glob("/dev/shm/spec_compat_*"))


def test_call_store_results_are_exact_owned_and_cleaned_up():
    before = segments()
    store = CallStore(layers=2, width=3, dtype=torch.float32, block_rows=8, per_segment=2)
    data = {r: [torch.randn(n, 3), torch.randn(n, 3)] for r, n in (("x", 5), ("y", 8), ("z", 0))}
    for req_id, (first, second) in data.items():  # x arrives in two pieces
        cut = first.shape[0] // 2
        for lo, hi in ((0, cut), (cut, first.shape[0])):
            for dst, src in zip(store.rows_for(req_id, hi - lo), (first, second), strict=True):
                store.fill(dst, src[lo:hi])
    reply = store.describe()
    assert len(segments() - before) == 2  # three blocks, two per segment
    attachments = Attachments()
    results = attachments.from_descriptors(pickle.loads(pickle.dumps(reply)))
    store.close()  # the worker unlinks; the driver's tensors keep their memory
    assert segments() == before
    for req_id, layers in data.items():
        for got, want in zip(results[req_id], layers, strict=True):
            taken = got.clone()
            assert type(taken) is torch.Tensor and torch.equal(taken, want)
            # a result owns exactly its bytes: saving it saves no neighbour
            assert taken.untyped_storage().nbytes() == want.numel() * 4
            assert taken.data_ptr() == got.data_ptr()  # the first clone copied nothing
            again = got.clone()  # a second clone is a real one
            assert torch.equal(again, want)
            assert want.numel() == 0 or again.data_ptr() != got.data_ptr()


def test_handed_over_tensors_behave_as_plain_tensors():
    tensor = torch.arange(6.0).view(2, 3).as_subclass(handed_over_class())
    assert type(tensor + 1) is torch.Tensor and type(tensor[0]) is torch.Tensor
    assert type(tensor.to(torch.float64)) is torch.Tensor
    assert torch.equal(tensor.clone(), torch.arange(6.0).view(2, 3))


def test_a_full_shm_raises_memory_error_not_sigbus(monkeypatch):
    store = CallStore(layers=1, width=4, dtype=torch.float32, block_rows=4, per_segment=1)

    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    (view,) = store.rows_for("a", 2)
    with pytest.raises(ShmFull, match=r"MiB more were needed .* MiB are free") as caught:
        store.fill(view, torch.ones(2, 4))
    assert isinstance(caught.value, MemoryError)
    store.close()
    # the driver raises it again from vLLM's wrapping of the worker's error
    wrapped = RuntimeError(f"Worker failed with error '{caught.value}', please check the stack")
    again = ShmFull.from_worker(wrapped)
    assert isinstance(again, ShmFull) and str(again) == str(caught.value)
    assert ShmFull.from_worker(RuntimeError("Worker failed with error 'boom'")) is None


def test_bad_row_flags_mark_nan_inf_and_zero_rows_of_any_layer():
    first, second = torch.ones(6, 4), torch.ones(6, 4)
    first[1, 0] = float("nan")
    second[2, 3] = float("-inf")
    first[4] = 0
    second[5, 1] = float("inf")
    second[0] = 0.0
    second[0, 2] = -1.0  # zeros but one: not an all-zero row
    assert bad_row_flags([first, second]).tolist() == [False, True, True, False, True, True]
    assert not bad_row_flags([torch.ones(3, 4)]).any()


def test_cpu_copier_copies_at_once():
    store = CallStore(layers=2, width=2, dtype=torch.float32, block_rows=4, per_segment=1)
    sources = [torch.arange(8.0).view(4, 2), -torch.arange(8.0).view(4, 2)]
    copier = Copier()
    copier.submit(store, sources, [(store.rows_for("a", 3), 1, 3)])
    copier.drain()
    got = Attachments().from_descriptors(store.describe())["a"]
    assert all(torch.equal(g, s[1:]) for g, s in zip(got, sources, strict=True))
    assert copier.pool is None  # nothing ran on a thread
    store.close()


def test_segments_are_reused_only_once_no_result_uses_them():
    before = segments()
    pool = SegmentPool()
    attachments = Attachments()

    def call(value: float) -> dict:
        store = CallStore(1, 2, torch.float32, block_rows=4, per_segment=1, pool=pool)
        for req_id in ("a", "b"):
            (view,) = store.rows_for(req_id, 3)
            store.fill(view, torch.full((3, 2), value))
        results = attachments.from_descriptors(store.describe())
        store.hand_over()
        return {k: [t.clone() for t in v] for k, v in results.items()}

    first = call(1.0)
    assert attachments.released() == []  # `first` is alive: nothing may be reused
    names = set(pool.handed)
    view_of_first = first["a"][0][1:]  # a view keeps its segment too
    second = call(2.0)
    assert not names & {s.shm.name for s in pool.spare}
    assert all(bool((t == 1.0).all()) for v in first.values() for t in v)  # untouched
    del first  # b's segment is free now; a's is held by the view (one block per segment)
    free = attachments.released()
    assert len(free) == 1 and set(free) < names
    del view_of_first
    free += attachments.released()
    assert set(free) == names
    pool.release(free)
    assert {s.shm.name for s in pool.spare} == names
    third = call(3.0)  # reuses the first call's pages
    assert pool.reused == 2 and not pool.spare and names <= set(pool.handed)
    assert all(bool((t == 3.0).all()) for v in third.values() for t in v)
    assert all(bool((t == 2.0).all()) for v in second.values() for t in v)
    del second, third
    pool.close()
    assert segments() == before


def test_pool_keeps_no_more_spares_than_results_ever_held():
    before = segments()
    pool = SegmentPool()
    attachments = Attachments()
    stores = [CallStore(1, 2, torch.float32, 4, 1, pool=pool) for _ in range(3)]
    results = []
    for store in stores:
        (view,) = store.rows_for("a", 1)
        store.fill(view, torch.ones(1, 2))
        results.append(attachments.from_descriptors(store.describe()))
        store.hand_over()
    assert pool.peak == 3
    results.clear()
    pool.release(attachments.released())
    assert len(pool.spare) == 3  # a pass as large as the last one reuses them all
    pool.peak = 1  # as if results had only ever been held one call at a time
    pool.release([])
    assert len(pool.spare) == 1
    pool.close()
    assert segments() == before
