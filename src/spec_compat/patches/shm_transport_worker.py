"""Worker half of the shared-memory transport for captured hidden states.

Target: ``custom_worker.HiddenStatesWorkerExtension`` (speculators 0.3.0 and 0.4.x), in every
    vLLM worker process; the driver half is ``shm_transport_driver``.
Why: the stock ``_get_captured_states`` returns every captured tensor through
    ``collective_rpc``, which pickles them: on an H200 (vLLM 0.24, 0.85 B Llama) 87 % of the
    extractor's time, 0.064x bare prefill.  The stock worker also keeps every step's
    captured tensors in GPU memory until the end of the call.
How: the name ``HiddenStatesWorkerExtension`` in the stock worker module (which vLLM mixes
    into its worker by qualified name) becomes a subclass that copies each step's captured
    rows to host shared memory as they are stored, and whose ``_get_captured_states``
    returns descriptors (``spec_compat.transport.ArenaTensor``) instead of bytes:
    - 0.4.x: the stock bookkeeping runs, then the step's rows go straight to their
      requests' blocks in this call's segments (``CallStore``; the stock row-to-request
      rule replayed step by step by ``RowMatcher``), on GPUs staged by a side CUDA stream
      and moved by host threads while the next step computes.  The driver takes the
      blocks over as its results; segments whose results it has dropped come back for
      reuse (``SegmentPool``), since fresh memory is the dearest part of the copy.  The
      rows are also tested for NaN/Inf and all-zero rows where they are (on the GPU), so
      ``generate_checks`` need not read them again; the count travels in the reply.
    - 0.3.0: rows go to a reused per-worker arena, pinned on GPUs; the stock per-layer
      concatenation becomes a view of it, which the driver clones as it always did.
    It falls back to the stock path when the driver half is not selected or ``/dev/shm`` is
    too small for the arena; a /dev/shm that fills during a call raises ``MemoryError``.
Upstream change: none; the stock RPC path is slow on every vLLM release.
Remove when: the extractor streams captured states itself (speculators >= 0.5 uses vLLM's
    own ``extract_hidden_states``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from types import ModuleType
from typing import Any

from ..gates import Need, Verdict
from ..registry import ENV_PATCHES, Patch
from ..transport import (
    WORKER_CHECKED,
    Arena,
    CallStore,
    Copier,
    RowMatcher,
    SegmentPool,
    adjacent_view,
    bad_row_flags,
    shm_free_bytes,
    to_descriptors,
)
from ._stock import WORKER

log = logging.getLogger(__name__)
DRIVER_HALF = "shm_transport_driver"
#: host threads that move staged rows into the call's blocks (GPU platforms; a layer each)
COPY_THREADS = int(os.environ.get("SPEC_COMPAT_COPY_THREADS", min(4, (os.cpu_count() or 2) // 2)))
METHODS = ("_reset_capture", "_store_captured_states", "_get_captured_states")


def probe(module: ModuleType) -> Verdict:
    ext = getattr(module, "HiddenStatesWorkerExtension", None)
    missing = [m for m in METHODS if not hasattr(ext, m)]
    if ext is None or missing:
        return Verdict(Need.UNKNOWN, f"HiddenStatesWorkerExtension lacks {missing}")
    if shm_free_bytes() == 0:
        return Verdict(Need.NOT_NEEDED, "no /dev/shm here: the stock RPC path stays")
    found = f"HiddenStatesWorkerExtension has {', '.join(METHODS)}"
    return Verdict(Need.NEEDED, found, "the stock path pickles every captured tensor")


def _enabled() -> bool:
    return DRIVER_HALF in os.environ.get(ENV_PATCHES, "").split(",")


def _cat(pieces: list[Any]) -> Any:
    """`torch.cat(pieces)`: the spanning view when the pieces are adjacent (arena rows)."""
    import torch

    if len(pieces) == 1:
        return pieces[0]
    view = adjacent_view(pieces, 0)
    return torch.cat(pieces, dim=0) if view is None else view


class _Chunk(list):
    """One step's captured tensors (per layer), with their rows' `bad_row_flags`."""

    bad: Any = None


def wrap(original: type) -> type:
    by_request = hasattr(original, "_set_request_metadata")  # speculators 0.4.x

    class HiddenStatesWorkerExtension(original):  # type: ignore[misc, valid-type]
        _spec_compat_arena: Arena | None = None  # per layer (0.3.0), reused across calls
        _spec_compat_call: tuple[CallStore, RowMatcher] | None = None  # per request (0.4.x)
        _spec_compat_done: CallStore | None = None  # the last call's, until the next starts
        _spec_compat_copier: Copier | None = None
        _spec_compat_pool: SegmentPool | None = None  # per-call segments, for reuse
        _spec_compat_bad: Any = 0  # rows failing generate_checks' value test, this call
        _spec_compat_layout: str | None = None

        def _reset_capture(self) -> Any:
            result = super()._reset_capture()
            if self._spec_compat_arena is not None:
                self._spec_compat_arena.rows = [0] * self._spec_compat_arena.layers
            self._spec_compat_end_call()
            return result

        def _store_captured_states(self, aux_hidden_states: list[Any]) -> Any:
            if not _enabled():
                return super()._store_captured_states(aux_hidden_states)
            if by_request:
                return self._spec_compat_store_by_request(aux_hidden_states)
            arena = self._spec_compat_arena_for(aux_hidden_states)
            if arena is not None:
                self._spec_compat_layout = "per layer"
                aux_hidden_states = [arena.append(i, h) for i, h in enumerate(aux_hidden_states)]
            return super()._store_captured_states(aux_hidden_states)

        def _get_captured_states(self) -> Any:
            if by_request and self._spec_compat_call is not None and _enabled():
                return self._spec_compat_reply_by_request()
            arena = self._spec_compat_arena
            captured = getattr(self, "_captured_states", None)
            if arena is None or captured is None or not _enabled():
                return super()._get_captured_states()
            if not all(arena.owns(t) for per_layer in captured for t in per_layer):
                return super()._get_captured_states()  # stored before the arena existed
            if arena.pinned:
                import torch

                torch.cuda.current_stream().synchronize()
            layers = [_cat(per_layer) for per_layer in captured]
            self._captured_states = None
            return to_descriptors(layers, arena)

        # -- per request (0.4.x) --------------------------------------------------------
        def _spec_compat_store_by_request(self, aux_hidden_states: list[Any]) -> Any:
            if not hasattr(self, "_request_metadata"):  # a warm-up forward, before any call
                return super()._store_captured_states(aux_hidden_states)
            seen = len(self._request_metadata)
            # the stock bookkeeping (metadata sorted into vLLM's batch order), then nothing
            # of the step stays on the device
            result = super()._store_captured_states(aux_hidden_states)
            self._captured_states = None
            if self._spec_compat_call is None:
                store = self._spec_compat_new_store(aux_hidden_states)
                self._spec_compat_call = (store, RowMatcher())
                self._spec_compat_layout = "per request"
            store, matcher = self._spec_compat_call
            step = _Chunk(aux_hidden_states)
            if step and step[0].shape[0]:
                step.bad = bad_row_flags(step)
            pieces, spans = matcher.feed(step, self._request_metadata[seen:])
            if self._spec_compat_copier is None:
                self._spec_compat_copier = Copier(threads=COPY_THREADS)
            by_source: dict[int, tuple[list[Any], list[Any]]] = {}
            for req_id, source, first, rows in pieces:
                views = store.rows_for(req_id, rows)
                if rows:
                    by_source.setdefault(id(source), (source, []))[1].append((views, first, rows))
            for source, step_pieces in by_source.values():
                self._spec_compat_copier.submit(store, source, step_pieces)
            for chunk, start, end in spans:  # rows handed out: count the faulty ones
                self._spec_compat_bad = self._spec_compat_bad + chunk.bad[start:end].sum()
            return result

        def _spec_compat_new_store(self, like: list[Any]) -> CallStore:
            config = getattr(self, "vllm_config", None)
            scheduler = getattr(config, "scheduler_config", None)
            model = getattr(config, "model_config", None)
            block_rows = getattr(model, "max_model_len", None) or like[0].shape[0]
            per_segment = getattr(scheduler, "max_num_seqs", None) or 32
            width, dtype = like[0].shape[1], like[0].dtype
            if self._spec_compat_pool is None:
                self._spec_compat_pool = SegmentPool()
            pool = self._spec_compat_pool
            return CallStore(len(like), width, dtype, block_rows, per_segment, pool)

        def _spec_compat_reply_by_request(self) -> dict:
            store, matcher = self._spec_compat_call
            for req_id in matcher.unmet():  # the stock slices come up short: so do these
                store.rows_for(req_id, 0)
            if self._spec_compat_copier is not None:
                self._spec_compat_copier.drain()
            reply: dict[str, Any] = dict(store.describe())
            reply[WORKER_CHECKED] = int(self._spec_compat_bad)
            self._request_metadata = []
            self._spec_compat_call, self._spec_compat_done = None, store
            self._spec_compat_bad = 0
            return reply

        def _spec_compat_end_call(self) -> None:
            """Before a call: pool the last call's segments (the driver has mapped them)
            and drop what a failed call left."""
            if self._spec_compat_copier is not None:
                with contextlib.suppress(RuntimeError):
                    self._spec_compat_copier.drain()
            if self._spec_compat_done is not None:  # the driver maps it: pooled till released
                self._spec_compat_done.hand_over()
            if self._spec_compat_call is not None:  # a failed call: nobody maps it
                self._spec_compat_call[0].close()
            self._spec_compat_call = self._spec_compat_done = None
            self._spec_compat_bad = 0

        def _spec_compat_recycle(self, names: list[str]) -> None:
            """The driver holds no result in these segments any more: reuse them."""
            if self._spec_compat_pool is not None:
                self._spec_compat_pool.release(names)

        # -- per layer (0.3.0) ----------------------------------------------------------
        def _spec_compat_arena_for(self, tensors: list[Any]) -> Arena | None:
            first = tensors[0]
            rows, width = first.shape[0], first.shape[1]
            arena = self._spec_compat_arena
            if arena is not None and (arena.layers, arena.width, arena.dtype) == (
                len(tensors),
                width,
                first.dtype,
            ):
                if arena.fits(rows):
                    return arena
                return self._spec_compat_grow(arena, rows)
            return self._spec_compat_new_arena(len(tensors), width, first, rows)

        def _spec_compat_new_arena(self, layers: int, width: int, like: Any, rows: int):
            config = getattr(self, "vllm_config", None)
            scheduler = getattr(config, "scheduler_config", None)
            model = getattr(config, "model_config", None)
            # one call's rows, twice: room for requests prefilled over several steps
            planned = 2 * getattr(scheduler, "max_num_seqs", 1) * getattr(model, "max_model_len", 0)
            capacity = max(rows, planned)
            nbytes = layers * capacity * width * like.element_size()
            if nbytes > shm_free_bytes() * 0.9:
                log.warning("spec_compat: /dev/shm too small for %d bytes; stock RPC path", nbytes)
                return None
            if self._spec_compat_arena is not None:
                self._spec_compat_arena.close()
            self._spec_compat_arena = Arena(layers, width, like.dtype, capacity, like.is_cuda)
            return self._spec_compat_arena

        def _spec_compat_grow(self, old: Arena, rows: int) -> Arena | None:
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
                self._captured_states[index] = [  # the stock list: re-point it
                    new.layer(index)[(t.data_ptr() - base) // row_bytes :][: t.shape[0]]
                    for t in self._captured_states[index]
                ]
            old.close()
            self._spec_compat_arena = new
            return new

    HiddenStatesWorkerExtension.__qualname__ = original.__qualname__
    HiddenStatesWorkerExtension.__module__ = original.__module__
    return HiddenStatesWorkerExtension


PATCH = Patch(
    name="shm_transport_worker",
    side="worker",
    module=WORKER,
    target="HiddenStatesWorkerExtension",
    summary="captured states go to the driver through a shared-memory arena, not pickles",
    probe=probe,
    wrap=wrap,
)
