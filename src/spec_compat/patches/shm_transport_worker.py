"""Worker half of the shared-memory transport for captured hidden states.

Target: ``custom_worker.HiddenStatesWorkerExtension`` (speculators 0.3.0 and 0.4.x), in every
    vLLM worker process; the driver half is ``shm_transport_driver``.
Why: the stock ``_get_captured_states`` returns every captured tensor through
    ``collective_rpc``, which pickles them: on an H200 (vLLM 0.24, 0.85 B Llama) 87 % of the
    extractor's time, 0.064x bare prefill.  The stock worker also keeps every step's
    captured tensors in GPU memory until the end of the call.
How: the name ``HiddenStatesWorkerExtension`` in the stock worker module (which vLLM mixes
    into its worker by qualified name) becomes a subclass that copies each step's captured
    rows into a shared-memory arena as they are stored (pinned and asynchronous on GPUs),
    and whose ``_get_captured_states`` builds the stock result - per-layer tensors (0.3.0)
    or per-request tensors (0.4.x), by the stock rules - as views of that arena and returns
    descriptors (``spec_compat.transport.ArenaTensor``) instead of bytes.  It falls back to
    the stock path when the driver half is not selected or ``/dev/shm`` is too small.
Upstream change: none; the stock RPC path is slow on every vLLM release.
Remove when: the extractor streams captured states itself (speculators >= 0.5 uses vLLM's
    own ``extract_hidden_states``).
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from types import ModuleType
from typing import Any

from ..gates import Need, Verdict
from ..registry import ENV_PATCHES, Patch
from ..transport import Arena, adjacent_view, shm_free_bytes, to_descriptors
from ._stock import WORKER

log = logging.getLogger(__name__)
DRIVER_HALF = "shm_transport_driver"
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


def _cat(pieces: list[Any], arena: Arena | None = None, index: int = 0) -> Any:
    """`torch.cat(pieces)`: the spanning view when the pieces are adjacent, else a copy
    written after layer `index`'s rows in the arena (so it still travels as a descriptor)."""
    import torch

    if len(pieces) == 1:
        return pieces[0]
    view = adjacent_view(pieces, 0)
    if view is not None:
        return view
    rows = sum(p.shape[0] for p in pieces)
    if arena is not None and arena.fits(rows) and pieces[0].dim() == 2:
        start = arena.rows[index]
        out = arena.layer(index)[start : start + rows]
        with torch.inference_mode(out.is_inference()):  # arenas made by older code
            torch.cat(pieces, dim=0, out=out)
        arena.rows[index] = start + rows
        return out
    return torch.cat(pieces, dim=0)


def per_request(
    layers: list[Any], request_metadata: list[list[tuple[str, int]]], arena: Arena | None = None
) -> dict:
    """speculators 0.4.x's grouping of the concatenated rows by request, with views (a request
    prefilled over several steps is concatenated into the arena)."""
    chunks: defaultdict[str, list[list[Any]]] = defaultdict(lambda: [[] for _ in layers])
    row = 0
    for step in request_metadata:
        for req_id, count in step:
            for index, layer in enumerate(layers):
                chunks[req_id][index].append(layer[row : row + count])
            row += count
    return {
        req_id: [_cat(c, arena, i) for i, c in enumerate(per_layer)]
        for req_id, per_layer in chunks.items()
    }


def wrap(original: type) -> type:
    class HiddenStatesWorkerExtension(original):  # type: ignore[misc, valid-type]
        _spec_compat_arena: Arena | None = None

        def _reset_capture(self) -> Any:
            result = super()._reset_capture()
            if self._spec_compat_arena is not None:
                self._spec_compat_arena.rows = [0] * self._spec_compat_arena.layers
            return result

        def _store_captured_states(self, aux_hidden_states: list[Any]) -> Any:
            arena = self._spec_compat_arena_for(aux_hidden_states) if _enabled() else None
            if arena is not None:
                aux_hidden_states = [arena.append(i, h) for i, h in enumerate(aux_hidden_states)]
            return super()._store_captured_states(aux_hidden_states)

        def _get_captured_states(self) -> Any:
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
            if hasattr(type(self), "_set_request_metadata"):  # speculators 0.4.x
                result: Any = per_request(layers, self._request_metadata, arena)
                self._request_metadata = []
            else:
                result = layers
            return to_descriptors(result, arena)

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
