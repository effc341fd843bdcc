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

Modules: `wire` (the descriptors), `shm` (segments, the per-layer arena, the pool), `worker`
(per-call stores and the copy engine), `driver` (mapping replies back into tensors).  What
speculators' worker does with them is `spec_compat.patches._worker_transport`.

It imports nothing of spec_compat outside this package (the patches use it).
"""

from spec_compat.transport.driver import Attachments, handed_over_class
from spec_compat.transport.shm import (
    Arena,
    Segment,
    SegmentPool,
    ShmFull,
    ShmFullOnCollect,
    shm_full_from_worker,
)
from spec_compat.transport.wire import (
    PREFIX,
    SHM_DIR,
    ArenaTensor,
    adjacent_view,
    shm_free_bytes,
    to_descriptors,
)
from spec_compat.transport.worker import CallStore, Copier

__all__ = [
    "PREFIX",
    "SHM_DIR",
    "Arena",
    "ArenaTensor",
    "Attachments",
    "CallStore",
    "Copier",
    "Segment",
    "SegmentPool",
    "ShmFull",
    "ShmFullOnCollect",
    "adjacent_view",
    "handed_over_class",
    "shm_free_bytes",
    "shm_full_from_worker",
    "to_descriptors",
]
