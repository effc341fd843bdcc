"""Captured hidden states from worker to driver through shared memory, not pickles.

The stock extractors return every captured tensor through `collective_rpc`, which pickles
them (measured on an H200: 5.36 GB at ~0.42 GB/s, 87 % of the extractor's time).  Here the
RPC reply carries `ArenaTensor` descriptors (segment name, offset, shape, strides) instead,
and the bytes travel through POSIX shared memory, in one of two layouts:

- **per request** (speculators 0.4.x, whose worker groups rows by request): each call gets
  fresh segments (`CallStore`) in which every request owns a block, one run of rows per
  layer.  Each step's rows are copied into their requests' blocks as soon as they exist (on
  GPUs from a side thread and CUDA stream, overlapping the next forward step).  The driver
  takes the blocks over as its results (`HandedOver`): no copy on the driver, and every
  result owns exactly its bytes;
- **per layer** (0.3.0, whose driver slices one concatenated tensor per layer): one arena
  per worker (`Arena`), reused across calls, pinned on GPUs; the stock code works on views
  (`torch.cat` of adjacent views is the view spanning them) and clones them as it always did.

Values are bitwise those of the stock path: only bytes are copied.  GPU memory no longer
accumulates across a call.  Segments are unlinked by the worker (per-call ones when the next
call starts), on shutdown, at exit, and by Python's resource tracker if a process dies.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import mmap
import os
import queue
import secrets
import sys
import threading
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any

PREFIX = "spec_compat_"
SHM_DIR = "/dev/shm"
#: key of a per-request reply that carries how many rows failed the worker's value test
WORKER_CHECKED = "spec_compat:bad_rows"


@dataclass(frozen=True)
class ArenaTensor:
    """A tensor living in a worker's arena: what the RPC carries instead of its bytes."""

    segment: str
    offset: int  # in elements of `dtype`
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str
    #: a per-call segment whose views the driver takes over as results (`CallStore`)
    handed_over: bool = False


def _dtype(name: str) -> Any:
    import torch

    return getattr(torch, name.removeprefix("torch."))


def shm_free_bytes() -> int:
    try:
        stats = os.statvfs(SHM_DIR)
    except OSError:
        return 0
    return stats.f_bavail * stats.f_frsize


class Arena:
    """One shared-memory segment; layer `i` owns rows [i*capacity, (i+1)*capacity)."""

    def __init__(self, layers: int, width: int, dtype: Any, capacity: int, pin: bool):
        import torch

        self.layers, self.width, self.dtype, self.capacity = layers, width, dtype, capacity
        itemsize = torch.empty((), dtype=dtype).element_size()
        nbytes = max(1, layers * capacity * width * itemsize)
        self.shm = _new_segment(nbytes)
        # A normal tensor even when created inside the forward pass (inference mode): it is
        # written outside inference mode too (growth, per-request concatenation).
        with torch.inference_mode(False):
            self.flat = torch.frombuffer(self.shm.buf, dtype=dtype, count=nbytes // itemsize)
        self.pinned = False
        if pin and torch.cuda.is_available():
            cudart = torch.cuda.cudart()
            self.pinned = cudart.cudaHostRegister(self.flat.data_ptr(), nbytes, 0) == 0
        self.rows = [0] * layers
        self._finalizer = weakref.finalize(self, _close, self.shm, self.flat, self.pinned)

    @property
    def name(self) -> str:
        return self.shm.name

    def layer(self, index: int) -> Any:
        start = index * self.capacity * self.width
        return self.flat[start : start + self.capacity * self.width].view(self.capacity, self.width)

    def fits(self, rows: int) -> bool:
        return all(used + rows <= self.capacity for used in self.rows)

    def append(self, index: int, tensor: Any) -> Any:
        """Copy `tensor` (rows x width) after layer `index`'s rows; return the arena view."""
        start = self.rows[index]
        view = self.layer(index)[start : start + tensor.shape[0]]
        view.copy_(tensor, non_blocking=self.pinned)
        self.rows[index] = start + tensor.shape[0]
        return view

    def owns(self, tensor: Any) -> bool:
        base = self.flat.data_ptr()
        end = base + self.flat.numel() * self.flat.element_size()
        return tensor.device.type == "cpu" and base <= tensor.data_ptr() < end

    def describe(self, tensor: Any) -> ArenaTensor:
        offset = (tensor.data_ptr() - self.flat.data_ptr()) // tensor.element_size()
        return ArenaTensor(
            self.name, offset, tuple(tensor.shape), tuple(tensor.stride()), str(tensor.dtype)
        )

    def close(self) -> None:
        self._finalizer()


def _new_segment(nbytes: int) -> Any:
    from multiprocessing import shared_memory

    name = f"{PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
    return shared_memory.SharedMemory(name=name, create=True, size=nbytes)


def _close(shm: Any, flat: Any, pinned: bool) -> None:
    if pinned:
        import torch

        torch.cuda.cudart().cudaHostUnregister(flat.data_ptr())
    del flat
    with contextlib.suppress(BufferError):  # views still alive: the unlink still frees it
        shm.close()
    with contextlib.suppress(FileNotFoundError):
        shm.unlink()


def adjacent_view(tensors: list[Any], dim: int) -> Any | None:
    """The single view that `torch.cat(tensors, dim)` equals, when the pieces are adjacent
    row blocks of one contiguous storage (what the arena produces); else None."""
    if dim != 0 or len(tensors) < 2:
        return None
    first = tensors[0]
    if first.device.type != "cpu" or first.dim() != 2 or not first.is_contiguous():
        return None
    row_bytes = first.shape[1] * first.element_size()
    expected = first.data_ptr()
    rows = 0
    for piece in tensors:
        if (
            piece.dtype != first.dtype
            or piece.dim() != 2
            or piece.shape[1] != first.shape[1]
            or not piece.is_contiguous()
            or piece.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
            or piece.data_ptr() != expected
        ):
            return None
        expected += piece.shape[0] * row_bytes
        rows += piece.shape[0]
    storage_offset = first.storage_offset()
    return first.new_empty(0).set_(
        first.untyped_storage(), storage_offset, (rows, first.shape[1]), first.stride()
    )


def to_descriptors(payload: Any, arena: Arena | None) -> Any:
    """Replace arena tensors in a (nested list/tuple/dict) payload by descriptors."""
    import torch

    if isinstance(payload, torch.Tensor):
        if arena is not None and arena.owns(payload):
            return arena.describe(payload)
        return payload
    if isinstance(payload, list | tuple):
        return type(payload)(to_descriptors(p, arena) for p in payload)
    if isinstance(payload, dict):
        return {k: to_descriptors(v, arena) for k, v in payload.items()}
    return payload


class RowMatcher:
    """speculators 0.4.x's rule for which captured rows belong to which request, applied step
    by step: the rows of all steps, concatenated, go to the metadata entries of all steps, in
    order, `count` rows each (the stock worker slices the concatenation with one cursor).
    Rows not yet claimed and claims not yet met wait for the next step."""

    def __init__(self) -> None:
        self.claims: deque[list[Any]] = deque()  # [request id, rows still owed]
        self.chunks: deque[list[Any]] = deque()  # per-layer tensors of a step, not yet claimed
        self.offset = 0  # rows of chunks[0] already handed out

    def feed(
        self, layers: list[Any] | None, steps: list[list[tuple[str, int]]]
    ) -> tuple[list[tuple[str, Any, int, int]], list[tuple[list[Any], int, int]]]:
        """Add one step's rows (per-layer tensors) and metadata.  Returns the pieces handed
        out, [(request id, per-layer tensors, first row, row count)] (no tensors and 0 rows
        for a zero-row claim, to which the stock slicing gives an empty chunk), and the row
        ranges they cover, merged [(per-layer tensors, start, end)]."""
        self.claims.extend([req_id, count] for step in steps for req_id, count in step)
        if layers is not None and layers[0].shape[0] > 0:
            self.chunks.append(layers)
        pieces: list[tuple[str, Any, int, int]] = []
        spans: list[tuple[list[Any], int, int]] = []
        while self.claims and (self.chunks or self.claims[0][1] == 0):
            req_id, owed = self.claims[0]
            if owed == 0:
                pieces.append((req_id, None, 0, 0))
                self.claims.popleft()
                continue
            chunk = self.chunks[0]
            take = min(owed, chunk[0].shape[0] - self.offset)
            pieces.append((req_id, chunk, self.offset, take))
            if spans and spans[-1][0] is chunk and spans[-1][2] == self.offset:
                spans[-1] = (chunk, spans[-1][1], self.offset + take)
            else:
                spans.append((chunk, self.offset, self.offset + take))
            self.offset += take
            self.claims[0][1] = owed - take
            if self.claims[0][1] == 0:
                self.claims.popleft()
            if self.offset == chunk[0].shape[0]:
                self.chunks.popleft()
                self.offset = 0
        return pieces, spans

    def unmet(self) -> list[str]:
        """Requests still owed rows at the end of a call (the stock slices come up short)."""
        return [req_id for req_id, _ in self.claims]


@dataclass
class Segment:
    """A per-call segment as the worker holds it: mapped, with an fd for `posix_fallocate`
    and, per run of rows, how far its pages are reserved (kept across reuse)."""

    shm: Any
    flat: Any
    fd: int
    reserved: dict[int, int]


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
        self._finalizer = weakref.finalize(self, _close_all, self.segments)

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
                    _reserve(segment.fd, offset, end - offset)
                    segment.reserved[run] = end
                return

    def _add_segment(self) -> None:
        import torch

        nbytes = self.per_segment * self.block_elems * self.itemsize
        segment = self.pool.take(nbytes, self.dtype) if self.pool is not None else None
        if segment is None:
            shm = _new_segment(nbytes)
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


class SegmentPool:
    """Worker side: per-call segments, reused once the driver has let go of their results.

    New memory is the dearest part of the copy: on the H200 host 8 threads wrote ~4.3 GB/s
    into fresh shared memory (fresh anonymous memory, huge pages or not, was no faster) and
    ~25 GB/s into memory written before (`benchmarks/gpu/host_memory.py`).  A segment
    stays mapped here while the driver holds results in it (`handed`); released, it waits
    in `spare` for the next call.  Spares never outnumber the most segments the driver
    ever held at once, which is the footprint of the results themselves.  All are
    unlinked on close, at exit, or by the resource tracker if the worker dies."""

    def __init__(self) -> None:
        self.handed: dict[str, Segment] = {}
        self.spare: list[Segment] = []
        self.peak = 0  # most segments handed over at once
        self.reused = 0
        self._finalizer = weakref.finalize(self, _close_pool, self.handed, self.spare)

    def take(self, nbytes: int, dtype: Any) -> Segment | None:
        for index, segment in enumerate(self.spare):
            if segment.shm.size == nbytes and segment.flat.dtype == dtype:
                self.reused += 1
                return self.spare.pop(index)
        return None

    def hand_over(self, segments: list[Segment]) -> None:
        self.handed.update((segment.shm.name, segment) for segment in segments)
        self.peak = max(self.peak, len(self.handed))

    def release(self, names: list[str]) -> None:
        """The driver holds no result in `names` any more."""
        self.spare += [self.handed.pop(n) for n in names if n in self.handed]
        while self.spare and len(self.spare) + len(self.handed) > self.peak:
            _close_all([self.spare.pop(0)])

    def close(self) -> None:
        self._finalizer()


def _close_pool(handed: dict, spare: list) -> None:
    _close_all(list(handed.values()))
    handed.clear()
    _close_all(spare)


class ShmFull(MemoryError):
    """/dev/shm has no room for a call's captured states (raised in the worker, and again
    in the driver from the worker's message)."""

    MARK = "spec_compat: /dev/shm is full"

    @classmethod
    def from_worker(cls, error: BaseException) -> ShmFull | None:
        """The worker's ShmFull inside vLLM's "Worker failed with error '...'", if there."""
        text = str(error)
        start = text.find(cls.MARK)
        if start < 0:
            return None
        end = text.find("', please check", start)
        return cls(text[start : end if end > 0 else None])


def _reserve(fd: int, offset: int, nbytes: int) -> None:
    try:
        os.posix_fallocate(fd, offset, nbytes)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        raise ShmFull(
            f"{ShmFull.MARK}: {nbytes / 2**20:.1f} MiB more were needed for this call's "
            f"states and {shm_free_bytes() / 2**20:.1f} MiB are free; give it more room "
            "(docker --shm-size, or --ipc=host), send fewer or shorter prompts per call, or "
            "exclude shm_transport_driver,shm_transport_worker (the stock, slower path)"
        ) from exc


def _close_all(segments: list[Segment]) -> None:
    while segments:
        segment = segments.pop()
        os.close(segment.fd)
        _close(segment.shm, segment.flat, pinned=False)


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


def row_faults(tensor: Any) -> tuple[Any, Any]:
    """Per row: (holds a NaN/Inf, is all zeros).  From each row's max and min, where NaN/Inf
    propagate and an all-zero row has both 0: no temporary the size of the states."""
    return _faults(tensor.amax(dim=-1), tensor.amin(dim=-1))


def _faults(high: Any, low: Any) -> tuple[Any, Any]:
    import torch

    return ~(torch.isfinite(high) & torch.isfinite(low)), (high == 0) & (low == 0)


def bad_row_flags(layers: list[Any]) -> Any:
    """Per row of a step's captured layers: does `row_faults` find it in any layer (a bool
    tensor on their device; no synchronisation): the worker's half of `generate_checks`,
    in ~20 kernel launches a step however many requests share it."""
    import torch

    nonfinite, zero = _faults(
        torch.stack([t.amax(dim=-1) for t in layers]),
        torch.stack([t.amin(dim=-1) for t in layers]),
    )
    return (nonfinite | zero).any(dim=0)


_handed_over_class: Any = None


def handed_over_class() -> Any:
    """A tensor type whose first `clone()` is the tensor itself, as a plain tensor.

    The transport makes one for each (request, layer) of a reply, over memory nobody else
    uses; the stock driver's `h.clone().cpu()` then costs nothing instead of copying every
    captured state once more.  Any other operation, and any later clone, is torch's own and
    returns plain tensors."""
    global _handed_over_class
    if _handed_over_class is None:
        import torch

        class HandedOver(torch.Tensor):
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                with torch._C.DisableTorchFunctionSubclass():
                    if func is torch.Tensor.clone and len(args) == 1 and not kwargs:
                        this = args[0]
                        if not getattr(this, "_spec_compat_taken", False):
                            this._spec_compat_taken = True
                            return this.as_subclass(torch.Tensor)
                    return func(*args, **kwargs)

        _handed_over_class = HandedOver
    return _handed_over_class


class Attachments:
    """Driver side: segments by name, mapped once, and views onto them.

    Segments are mapped straight from /dev/shm rather than through `SharedMemory`: attaching
    with `SharedMemory` registers the worker's segment with this process's resource tracker
    (before Python 3.13), which then unlinks or double-unregisters it."""

    def __init__(self) -> None:
        self.segments: dict[str, tuple[mmap.mmap, Any]] = {}
        self.handed: dict[str, mmap.mmap] = {}  # per-call segments, while results use them
        atexit.register(self.close)

    def flat(self, name: str, dtype: Any) -> Any:
        import torch

        if name not in self.segments:
            for old in list(self.segments):  # the worker grew its arena: drop the old one
                self._detach(old)
            with open(os.path.join(SHM_DIR, name), "r+b") as fh:
                mapping = mmap.mmap(fh.fileno(), 0)
            self.segments[name] = (mapping, torch.frombuffer(mapping, dtype=torch.uint8))
        return self.segments[name][1]

    def view(self, desc: ArenaTensor) -> Any:
        dtype = _dtype(desc.dtype)
        if desc.handed_over:
            return self.take(desc, dtype)
        raw = self.flat(desc.segment, dtype)
        typed = raw.view(dtype)
        return typed.as_strided(desc.shape, desc.stride, desc.offset)

    def take(self, desc: ArenaTensor, dtype: Any) -> Any:
        """A result that owns exactly its bytes of a per-call segment (no copy).  Only the
        tensors keep the mapping alive; the worker unlinks the segment."""
        import torch

        mapping = self.handed.get(desc.segment)
        if mapping is None:
            with open(os.path.join(SHM_DIR, desc.segment), "r+b") as fh:
                mapping = self.handed[desc.segment] = mmap.mmap(fh.fileno(), 0)
        rows, width = desc.shape
        itemsize = torch.empty((), dtype=dtype).element_size()
        if rows == 0:
            flat = torch.empty(0, dtype=dtype)
        else:
            with torch.inference_mode(False):
                flat = torch.frombuffer(
                    mapping, dtype=dtype, count=rows * width, offset=desc.offset * itemsize
                )
        return flat.view(rows, width).as_subclass(handed_over_class())

    def released(self) -> list[str]:
        """Per-call segments no result uses any more, forgotten here so that the worker may
        reuse them.  Every tensor `take` made holds its segment's mapping (`torch.frombuffer`
        keeps the buffer alive, views share the storage), so a mapping that only this table
        references has no live result."""
        # the references counted: this table's and getrefcount's argument
        free = [name for name in self.handed if sys.getrefcount(self.handed[name]) <= 2]
        for name in free:
            del self.handed[name]
        return free

    def from_descriptors(self, payload: Any) -> Any:
        if isinstance(payload, ArenaTensor):
            return self.view(payload)
        if isinstance(payload, list | tuple):
            return type(payload)(self.from_descriptors(p) for p in payload)
        if isinstance(payload, dict):
            return {k: self.from_descriptors(v) for k, v in payload.items()}
        return payload

    def _detach(self, name: str) -> None:
        mapping, flat = self.segments.pop(name)
        del flat
        with contextlib.suppress(BufferError):  # views still alive: unmapped when they go
            mapping.close()

    def close(self) -> None:
        for name in list(self.segments):
            self._detach(name)
