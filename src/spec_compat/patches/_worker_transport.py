"""What speculators' worker does with the shared-memory transport: one class per stock line.

`shm_transport_worker` gives each worker one of these; its overrides of the stock methods
delegate here, passing the worker and the stock method to fall back on.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

from spec_compat.engine.names import WORKER_CHECKED
from spec_compat.patches._row_checks import bad_row_flags
from spec_compat.patches._row_matching import RowMatcher
from spec_compat.transport import (
    Arena,
    CallStore,
    Copier,
    SegmentPool,
    adjacent_view,
    shm_free_bytes,
    to_descriptors,
)

log = logging.getLogger(__name__)
#: host threads that move staged rows into the call's blocks (GPU platforms; a layer each)
COPY_THREADS = int(os.environ.get("SPEC_COMPAT_COPY_THREADS", min(4, (os.cpu_count() or 2) // 2)))


#: speculators' own MAX_NUM_SEQS, which sized the first arena before vLLM's settings
STOCK_MAX_NUM_SEQS = 32


def _limits(worker: Any) -> tuple[int, int]:
    """The worker's (max_num_seqs, max_model_len), 0 where unknown."""
    config = getattr(worker, "vllm_config", None)
    seqs = getattr(getattr(config, "scheduler_config", None), "max_num_seqs", 0)
    return seqs or 0, getattr(getattr(config, "model_config", None), "max_model_len", 0) or 0


class _Chunk(list):
    """One step's captured tensors (per layer), with their rows' `bad_row_flags`."""

    bad: Any = None


class PerRequestTransport:
    """speculators 0.4.x: the stock bookkeeping runs, then each step's rows go straight to
    their requests' blocks in this call's segments (`CallStore`, the stock row-to-request
    rule replayed by `RowMatcher`), tested for NaN/Inf and all-zero rows where they are.
    The driver takes the blocks over; segments it lets go of come back for reuse."""

    def __init__(self) -> None:
        self.used: str | None = None  # the layout, once a call used it (worker_report)
        self.call: tuple[CallStore, RowMatcher] | None = None
        self.done: CallStore | None = None  # the last call's, until the next starts
        self.copier: Copier | None = None
        self.pool = SegmentPool()  # per-call segments, for reuse
        self.bad: Any = 0  # rows failing generate_checks' value test, this call

    @property
    def reused(self) -> int:
        return self.pool.reused

    def store(self, worker: Any, states: list[Any], stock_store: Any) -> Any:
        if not hasattr(worker, "_request_metadata"):  # a warm-up forward, before any call
            return stock_store(states)
        seen = len(worker._request_metadata)
        # the stock bookkeeping (metadata sorted into vLLM's batch order), then nothing of
        # the step stays on the device
        result = stock_store(states)
        worker._captured_states = None
        if self.call is None:
            seqs, model_len = _limits(worker)
            width, dtype = states[0].shape[1], states[0].dtype
            block_rows = model_len or states[0].shape[0]
            # segments of the stock 32 requests: one 8-prompt call maps one segment, as
            # before vLLM's 1,024 prompts a step (larger calls take several, reused)
            per_segment = min(seqs or STOCK_MAX_NUM_SEQS, STOCK_MAX_NUM_SEQS)
            store = CallStore(len(states), width, dtype, block_rows, per_segment, self.pool)
            self.call, self.used = (store, RowMatcher()), "per request"
        store, matcher = self.call
        step = _Chunk(states)
        if step and step[0].shape[0]:
            step.bad = bad_row_flags(step)
        pieces, spans = matcher.feed(step, worker._request_metadata[seen:])
        if self.copier is None:
            self.copier = Copier(threads=COPY_THREADS)
        by_source: dict[int, tuple[list[Any], list[Any]]] = {}
        for req_id, source, first, rows in pieces:
            views = store.rows_for(req_id, rows)
            if rows:
                by_source.setdefault(id(source), (source, []))[1].append((views, first, rows))
        for source, step_pieces in by_source.values():
            self.copier.submit(store, source, step_pieces)
        for chunk, start, end in spans:  # rows handed out: count the faulty ones
            self.bad = self.bad + chunk.bad[start:end].sum()
        return result

    def reply(self, worker: Any, stock_reply: Any) -> Any:
        if self.call is None:
            return stock_reply()
        store, matcher = self.call
        for req_id in matcher.unmet():  # the stock slices come up short: so do these
            store.rows_for(req_id, 0)
        if self.copier is not None:
            self.copier.drain()
        reply: dict[str, Any] = dict(store.describe())
        reply[WORKER_CHECKED] = int(self.bad)
        worker._request_metadata = []
        self.call, self.done, self.bad = None, store, 0
        return reply

    def reset(self, worker: Any) -> None:
        """Before a call: pool the last call's segments (the driver has mapped them) and
        drop what a failed call left."""
        if self.copier is not None:
            with contextlib.suppress(RuntimeError):
                self.copier.drain()
        if self.done is not None:  # the driver maps it: pooled till released
            self.done.hand_over()
        if self.call is not None:  # a failed call: nobody maps it
            self.call[0].close()
        self.call = self.done = None
        self.bad = 0

    def recycle(self, names: list[str]) -> None:
        """The driver holds no result in these segments any more: reuse them."""
        self.pool.release(names)


def _cat(pieces: list[Any]) -> Any:
    """`torch.cat(pieces)`: the spanning view when the pieces are adjacent (arena rows)."""
    import torch

    if len(pieces) == 1:
        return pieces[0]
    view = adjacent_view(pieces, 0)
    return torch.cat(pieces, dim=0) if view is None else view


class PerLayerTransport:
    """speculators 0.3.0: rows go to a reused per-worker arena (pinned on GPUs); the stock
    per-layer concatenation becomes a view of it, which the driver clones as it always did.
    Without room in /dev/shm for the arena, the stock path stays."""

    reused = 0  # no per-call segments

    def __init__(self) -> None:
        self.used: str | None = None
        self.arena: Arena | None = None

    def store(self, worker: Any, states: list[Any], stock_store: Any) -> Any:
        arena = self._arena_for(worker, states)
        if arena is not None:
            self.used = "per layer"
            states = [arena.append(i, h) for i, h in enumerate(states)]
        return stock_store(states)

    def reply(self, worker: Any, stock_reply: Any) -> Any:
        arena, captured = self.arena, getattr(worker, "_captured_states", None)
        if arena is None or captured is None:
            return stock_reply()
        if not all(arena.owns(t) for per_layer in captured for t in per_layer):
            return stock_reply()  # stored before the arena existed
        if arena.pinned:
            import torch

            torch.cuda.current_stream().synchronize()
        layers = [_cat(per_layer) for per_layer in captured]
        worker._captured_states = None
        return to_descriptors(layers, arena)

    def reset(self, worker: Any) -> None:
        if self.arena is not None:
            self.arena.rows = [0] * self.arena.layers

    def recycle(self, names: list[str]) -> None:
        pass

    def _arena_for(self, worker: Any, tensors: list[Any]) -> Arena | None:
        first, arena = tensors[0], self.arena
        rows, width = first.shape[0], first.shape[1]
        if arena is None or (arena.layers, arena.width, arena.dtype) != (
            len(tensors),
            width,
            first.dtype,
        ):
            return self._new_arena(worker, len(tensors), width, first, rows)
        return arena if arena.fits(rows) else self._grow(worker, arena, rows)

    def _new_arena(self, worker: Any, layers: int, width: int, like: Any, rows: int):
        seqs, model_len = _limits(worker)
        # one call's rows, twice: room for requests prefilled over several steps; sized for
        # calls of the stock 32 prompts (vLLM's 1,024 would reserve tens of GB up front):
        # larger calls grow it
        capacity = max(rows, 2 * min(seqs or 1, STOCK_MAX_NUM_SEQS) * model_len)
        nbytes = layers * capacity * width * like.element_size()
        if nbytes > shm_free_bytes() * 0.9:
            log.warning("spec_compat: /dev/shm too small for %d bytes; stock RPC path", nbytes)
            return None
        if self.arena is not None:
            self.arena.close()
        self.arena = Arena(layers, width, like.dtype, capacity, like.is_cuda)
        return self.arena

    def _grow(self, worker: Any, old: Arena, rows: int) -> Arena | None:
        capacity = max(2 * old.capacity, max(old.rows) + rows)
        nbytes = old.layers * capacity * old.width * old.flat.element_size()
        if nbytes > shm_free_bytes() * 0.9:
            raise MemoryError(f"spec_compat: /dev/shm cannot hold {nbytes} bytes of states")
        new = Arena(old.layers, old.width, old.dtype, capacity, old.pinned)
        if old.pinned:
            import torch

            torch.cuda.current_stream().synchronize()
        row_bytes = old.width * old.flat.element_size()
        for index in range(old.layers):
            used = old.rows[index]
            new.layer(index)[:used].copy_(old.layer(index)[:used])
            new.rows[index] = used
            base = old.layer(index).data_ptr()
            worker._captured_states[index] = [  # the stock list: re-point it
                new.layer(index)[(t.data_ptr() - base) // row_bytes :][: t.shape[0]]
                for t in worker._captured_states[index]
            ]
        old.close()
        self.arena = new
        return new
