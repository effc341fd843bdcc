"""The worker side: one call's captured rows, request by request, in shared memory, and
the copy engine that fills them while the next step computes."""

from __future__ import annotations

import os
import queue
import threading
import weakref
from typing import Any

from spec_compat.transport.shm import Segment, SegmentPool, close_all, new_segment, reserve
from spec_compat.transport.wire import SHM_DIR, ArenaTensor


class CallStore:
    """One call's captured rows, request by request, in shared memory (fresh, or segments
    of earlier calls from a `SegmentPool`).

    Request `n` owns block `n`: `layers` runs of `block_rows` rows, its result per layer being
    the filled prefix of its run.  Segments hold `per_segment` blocks and are sparse (only
    written rows take memory); each row range is `posix_fallocate`d before it is written, so
    a full /dev/shm raises `MemoryError` here instead of a SIGBUS in the copy."""

    def __init__(
        self,
        layers: int,
        width: int,
        dtype: Any,
        block_rows: int,
        per_segment: int,
        pool: SegmentPool | None = None,
    ):
        import torch

        self.pool = pool
        self.layers, self.width, self.dtype = layers, width, dtype
        self.block_rows, self.per_segment = block_rows, per_segment
        self.itemsize = torch.empty((), dtype=dtype).element_size()
        self.block_elems = layers * block_rows * width
        self.segments: list[Segment] = []
        self.blocks: dict[str, list[int]] = {}  # request id -> [block number, rows filled]
        self._finalizer = weakref.finalize(self, close_all, self.segments)

    def rows_for(self, req_id: str, count: int) -> list[Any]:
        """Per layer, the next `count` rows of `req_id`'s block (allocated on first sight)."""
        if req_id not in self.blocks:
            self.blocks[req_id] = [len(self.blocks), 0]
        number, filled = self.blocks[req_id]
        if filled + count > self.block_rows:
            raise RuntimeError(
                f"spec_compat: request {req_id} has more than {self.block_rows} captured rows"
            )
        segment, slot = divmod(number, self.per_segment)
        while segment >= len(self.segments):
            self._add_segment()
        flat = self.segments[segment].flat
        views = []
        for layer in range(self.layers):
            start = ((slot * self.layers + layer) * self.block_rows + filled) * self.width
            views.append(flat[start : start + count * self.width].view(count, self.width))
        self.blocks[req_id][1] = filled + count
        return views

    def fill(self, dst: Any, src: Any) -> None:
        """Copy `src` into `dst` (a `rows_for` view), reserving its pages first."""
        self.reserve(dst)
        dst.copy_(src)

    def reserve(self, dst: Any) -> None:
        """Reserve the pages of `dst` (a `rows_for` view) unless an earlier fill of its run
        did: a run is filled from its start, so what is reserved is a prefix of it."""
        if not dst.numel():
            return
        address = dst.data_ptr()
        run_bytes = self.block_rows * self.width * self.itemsize
        for segment in self.segments:
            base = segment.flat.data_ptr()
            if base <= address < base + segment.flat.numel() * self.itemsize:
                offset = address - base
                end = offset + dst.numel() * self.itemsize
                run = offset // run_bytes
                if segment.reserved.get(run, 0) < end:
                    reserve(segment.fd, offset, end - offset)
                    segment.reserved[run] = end
                return

    def _add_segment(self) -> None:
        import torch

        nbytes = self.per_segment * self.block_elems * self.itemsize
        segment = self.pool.take(nbytes, self.dtype) if self.pool is not None else None
        if segment is None:
            shm = new_segment(nbytes)
            fd = os.open(os.path.join(SHM_DIR, shm.name), os.O_RDWR)
            with torch.inference_mode(False):  # written from copy threads, outside it
                flat = torch.frombuffer(shm.buf, dtype=self.dtype)
            segment = Segment(shm, flat, fd, {})
        self.segments.append(segment)

    def describe(self) -> dict[str, list[ArenaTensor]]:
        reply = {}
        for req_id, (number, filled) in self.blocks.items():
            segment, slot = divmod(number, self.per_segment)
            name = self.segments[segment].shm.name if self.segments else ""
            reply[req_id] = [
                ArenaTensor(
                    name,
                    (slot * self.layers + layer) * self.block_rows * self.width,
                    (filled, self.width),
                    (self.width, 1),
                    str(self.dtype),
                    handed_over=True,
                )
                for layer in range(self.layers)
            ]
        return reply

    def hand_over(self) -> None:
        """The driver maps this call's segments now: the pool keeps them until it lets go
        (without a pool they are unlinked; the driver's mappings keep them alive)."""
        if self.pool is None:
            return self.close()
        self.pool.hand_over(self.segments)
        self.segments.clear()

    def close(self) -> None:
        self._finalizer()


class Copier:
    """Copies each step's rows into their requests' blocks while the next step computes.

    On a GPU: the step's rows go, per layer, into a pinned staging slot with one asynchronous
    copy on a side stream (after an event where they were captured); then up to `threads`
    host threads, a layer each, copy the pieces from the slot into the blocks.  A slot is
    reused once its pieces are out; with all `depth` slots busy the next step waits, which
    bounds memory.  On the CPU the copies run at once (there is nothing to overlap with).
    On the H200, 2, 4 and 8 threads measured the same once blocks were reused."""

    def __init__(self, threads: int = 4, depth: int = 3) -> None:
        self.threads, self.depth = threads, depth
        self.pool: Any = None
        self.stream: Any = None
        self.free: queue.Queue[Any] = queue.Queue()
        self.slots = 0
        self.futures: list[Any] = []

    def submit(self, store: CallStore, sources: list[Any], pieces: list[Any]) -> None:
        """`sources`: one step's rows per layer; `pieces`: [(per-layer views from
        `store.rows_for`, first row, row count)]."""
        if not pieces:
            return
        if not sources[0].is_cuda:
            for views, first, rows in pieces:
                for view, source in zip(views, sources, strict=True):
                    store.fill(view, source[first : first + rows])
            return
        import torch

        if self.pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="spec_compat-copy")
            self.stream = torch.cuda.Stream(device=sources[0].device)
        slot = self._slot(sources)
        staged = [buffer[: s.shape[0]] for buffer, s in zip(slot["buffers"], sources, strict=True)]
        captured = torch.cuda.Event()
        captured.record()
        with torch.cuda.stream(self.stream):
            self.stream.wait_event(captured)
            for buffer, source in zip(staged, sources, strict=True):
                buffer.copy_(source, non_blocking=True)
                source.record_stream(self.stream)  # not reused before the copy is done
            slot["staged"].record(self.stream)
        # one task per layer (or group of layers), moving all of its pieces with one
        # `_foreach_copy_`: a copy thread takes the GIL a few times a step, not per piece
        per_layer = [
            ([views[layer] for views, _, _ in pieces],
             [staged[layer][first : first + rows] for _, first, rows in pieces])
            for layer in range(len(staged))
        ]  # fmt: skip
        tasks = min(self.threads, len(per_layer))
        slot["left"] = tasks
        lock = threading.Lock()
        for i in range(tasks):
            group = per_layer[i::tasks]
            self.futures.append(self.pool.submit(self._fill, store, slot, group, lock))

    def _slot(self, sources: list[Any]) -> dict:
        import torch

        rows = sources[0].shape[0]
        if self.free.empty() and self.slots < self.depth:
            self.slots += 1
            # a blocking event: waiting copy threads sleep instead of polling the driver,
            # whose locks the forward's kernel launches need
            self.free.put({"buffers": [], "staged": torch.cuda.Event(blocking=True)})
        slot = self.free.get()  # blocks while every slot's pieces are still being copied
        if not slot["buffers"] or slot["buffers"][0].shape[0] < rows:
            slot["buffers"] = [
                torch.empty((rows, *s.shape[1:]), dtype=s.dtype, pin_memory=True) for s in sources
            ]
        return slot

    def _fill(self, store: CallStore, slot: dict, group: list, lock) -> None:
        import torch

        try:
            slot["staged"].synchronize()
            with torch.inference_mode():
                for views, sources in group:
                    for view in views:
                        store.reserve(view)
                    torch._foreach_copy_(views, sources)
        finally:
            with lock:
                slot["left"] -= 1
                if slot["left"] == 0:
                    self.free.put(slot)

    def drain(self) -> None:
        """Wait for every submitted copy; raise the first copy error, if any."""
        futures, self.futures = self.futures, []
        errors = [f.exception() for f in futures]
        if error := next((e for e in errors if e is not None), None):
            raise RuntimeError("spec_compat: copying captured states to the host failed") from error
