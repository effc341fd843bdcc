"""Shared-memory segments: created, reserved, pooled and unlinked by the worker."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from spec_compat.transport.wire import PREFIX, ArenaTensor, shm_free_bytes


class Arena:
    """One shared-memory segment; layer `i` owns rows [i*capacity, (i+1)*capacity)."""

    def __init__(self, layers: int, width: int, dtype: Any, capacity: int, pin: bool):
        import torch

        self.layers, self.width, self.dtype, self.capacity = layers, width, dtype, capacity
        itemsize = torch.empty((), dtype=dtype).element_size()
        nbytes = max(1, layers * capacity * width * itemsize)
        self.shm = new_segment(nbytes)
        # A normal tensor even when created inside the forward pass (inference mode): it is
        # written outside inference mode too (growth, per-request concatenation).
        with torch.inference_mode(False):
            self.flat = torch.frombuffer(self.shm.buf, dtype=dtype, count=nbytes // itemsize)
        self.pinned = False
        if pin and torch.cuda.is_available():
            cudart = torch.cuda.cudart()
            self.pinned = cudart.cudaHostRegister(self.flat.data_ptr(), nbytes, 0) == 0
        self.rows = [0] * layers
        self._finalizer = weakref.finalize(self, close_segment, self.shm, self.flat, self.pinned)

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


def new_segment(nbytes: int) -> Any:
    from multiprocessing import shared_memory

    name = f"{PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
    return shared_memory.SharedMemory(name=name, create=True, size=nbytes)


def close_segment(shm: Any, flat: Any, pinned: bool) -> None:
    if pinned:
        import torch

        torch.cuda.cudart().cudaHostUnregister(flat.data_ptr())
    del flat
    with contextlib.suppress(BufferError):  # views still alive: the unlink still frees it
        shm.close()
    with contextlib.suppress(FileNotFoundError):
        shm.unlink()


@dataclass
class Segment:
    """A per-call segment as the worker holds it: mapped, with an fd for `posix_fallocate`
    and, per run of rows, how far its pages are reserved (kept across reuse)."""

    shm: Any
    flat: Any
    fd: int
    reserved: dict[int, int]


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
            close_all([self.spare.pop(0)])

    def close(self) -> None:
        self._finalizer()


def _close_pool(handed: dict, spare: list) -> None:
    close_all(list(handed.values()))
    handed.clear()
    close_all(spare)


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


@contextlib.contextmanager
def shm_full_from_worker() -> Iterator[None]:
    """Raise a worker's ShmFull, which vLLM reports as a RuntimeError, as ShmFull."""
    try:
        yield
    except RuntimeError as exc:
        if full := ShmFull.from_worker(exc):
            raise full from exc
        raise


class ShmFullOnCollect:
    """A non-blocking reply (vLLM's future) whose worker ShmFull is raised as ShmFull when
    collected, as a blocking call raises it."""

    def __init__(self, future: Any) -> None:
        self.future = future

    def result(self, timeout: float | None = None) -> Any:
        with shm_full_from_worker():
            return self.future.result(timeout)


def reserve(fd: int, offset: int, nbytes: int) -> None:
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


def close_all(segments: list[Segment]) -> None:
    while segments:
        segment = segments.pop()
        os.close(segment.fd)
        close_segment(segment.shm, segment.flat, pinned=False)
