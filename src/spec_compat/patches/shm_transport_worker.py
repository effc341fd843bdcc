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
    Each worker holds one transport object (``_worker_transport``: ``PerRequestTransport``,
    ``PerLayerTransport``) to which the overrides delegate.  Skipped unless the driver half
    is selected too; the stock path stays when ``/dev/shm`` is too small for the arena; a
    /dev/shm that fills during a call raises ``MemoryError``.
Upstream change: none; the stock RPC path is slow on every vLLM release.
Remove when: the extractor streams captured states itself (speculators >= 0.5 uses vLLM's
    own ``extract_hidden_states``).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.names import (
    GET_CAPTURED,
    RESET_CAPTURE,
    STORE_CAPTURED,
    WORKER,
    WORKER_TRANSPORT,
)
from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict

METHODS = (RESET_CAPTURE, STORE_CAPTURED, GET_CAPTURED)


def probe(module: ModuleType) -> Verdict:
    ext = getattr(module, "HiddenStatesWorkerExtension", None)
    missing = [m for m in METHODS if not hasattr(ext, m)]
    if ext is None or missing:
        return Verdict(Need.UNKNOWN, f"HiddenStatesWorkerExtension lacks {missing}")
    from spec_compat.transport import (
        shm_free_bytes,  # the transport loads when the patch is decided
    )

    if shm_free_bytes() == 0:
        return Verdict(Need.NOT_NEEDED, "no /dev/shm here: the stock RPC path stays")
    found = f"HiddenStatesWorkerExtension has {', '.join(METHODS)}"
    return Verdict(Need.NEEDED, found, "the stock path pickles every captured tensor")


def wrap(original: type) -> type:
    from spec_compat.patches._worker_transport import PerLayerTransport, PerRequestTransport

    by_request = hasattr(original, "_set_request_metadata")  # speculators 0.4.x
    kind = PerRequestTransport if by_request else PerLayerTransport

    def transport(worker: Any) -> Any:
        if (found := getattr(worker, WORKER_TRANSPORT, None)) is None:
            setattr(worker, WORKER_TRANSPORT, found := kind())
        return found

    class HiddenStatesWorkerExtension(original):  # type: ignore[misc, valid-type]
        def _reset_capture(self) -> Any:
            result = super()._reset_capture()
            transport(self).reset(self)
            return result

        def _store_captured_states(self, aux_hidden_states: list[Any]) -> Any:
            stock = super()._store_captured_states
            return transport(self).store(self, aux_hidden_states, stock)

        def _get_captured_states(self) -> Any:
            return transport(self).reply(self, super()._get_captured_states)

        def _spec_compat_recycle(self, names: list[str]) -> None:  # names.RECYCLE_SEGMENTS
            transport(self).recycle(names)

    return HiddenStatesWorkerExtension


PATCH = declare(
    __name__,
    side="worker",
    module=WORKER,
    target="HiddenStatesWorkerExtension",
    summary="captured states go to the driver through a shared-memory arena, not pickles",
    requires=("shm_transport_driver",),
)
