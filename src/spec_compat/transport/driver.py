"""The driver side: the workers' segments mapped, and replies turned back into tensors."""

from __future__ import annotations

import atexit
import contextlib
import mmap
import os
import sys
from typing import Any

from spec_compat.transport.wire import SHM_DIR, ArenaTensor, dtype_named

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
        dtype = dtype_named(desc.dtype)
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
