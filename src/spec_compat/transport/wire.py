"""The wire format: what a `_get_captured_states` reply carries instead of tensor bytes."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

PREFIX = "spec_compat_"
SHM_DIR = "/dev/shm"


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


def dtype_named(name: str) -> Any:
    import torch

    return getattr(torch, name.removeprefix("torch."))


def shm_free_bytes() -> int:
    try:
        stats = os.statvfs(SHM_DIR)
    except OSError:
        return 0
    return stats.f_bavail * stats.f_frsize


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


def to_descriptors(payload: Any, arena: Any) -> Any:
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
