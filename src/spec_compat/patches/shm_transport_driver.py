"""Driver half of the shared-memory transport for captured hidden states.

Target: ``vllm_hidden_states_generator.MultiprocExecutor`` (speculators 0.3.0 and 0.4.x).
Why: see ``shm_transport_worker``: pickling the captured states through ``collective_rpc``
    dominates the stock extractor's time.
How: the stock module's ``MultiprocExecutor`` is a subclass whose ``collective_rpc`` turns
    the ``ArenaTensor`` descriptors of a ``_get_captured_states`` reply into tensors:
    - per-request replies (0.4.x): each (request, layer) becomes a tensor over exactly its
      bytes of the call's segment, whose first ``clone()`` is itself (``HandedOver``), so
      the stock ``h.clone().cpu()`` costs nothing and results own their memory.  The
      worker's value-test count is taken out of the reply and handed to ``generate_checks``
      as a ``WorkerChecks`` (``patches/_handoff.py``);
    - per-layer replies (0.3.0): views of the worker's arena (attached once, reused), which
      the stock driver clones as it always did.
    When a call starts, per-call segments that no live result uses are named to the
    workers (``_spec_compat_recycle``), which reuse them: memory written before is several
    times faster to fill than fresh memory.
    A worker's ``ShmFull`` (a full ``/dev/shm``) reaches the caller as ``ShmFull``, a
    ``MemoryError`` with the sizes and the fix, not as vLLM's ``RuntimeError``; also from
    a non-blocking reply (``names.NON_BLOCK``, set by ``executor_pipelined_steps``, which is
    declared to wrap this patch), when it is collected.
    Values are bitwise the stock ones.  A reply without descriptors (the worker fell back)
    passes through untouched.  Attachments close on ``shutdown()`` and at exit.
Upstream change: none.
Remove when: see ``shm_transport_worker``.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.names import (
    GET_CAPTURED,
    NON_BLOCK,
    RECYCLE_SEGMENTS,
    RESET_CAPTURE,
    WORKER_CHECKED,
)
from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict
from spec_compat.patches._handoff import WorkerChecks


def probe(module: ModuleType) -> Verdict:
    from spec_compat.transport import (
        shm_free_bytes,  # the transport loads when the patch is decided
    )

    if shm_free_bytes() == 0:
        return Verdict(Need.NOT_NEEDED, "no /dev/shm here: the stock RPC path stays")
    return Verdict(Need.NEEDED, f"/dev/shm free: {shm_free_bytes() >> 20} MiB", "faster path")


def wrap(original: type) -> type:
    from spec_compat.transport import Attachments, ShmFullOnCollect, shm_full_from_worker

    class MultiprocExecutor(original):  # type: ignore[misc, valid-type]
        _spec_compat_attachments: Attachments | None = None

        def collective_rpc(self, method: Any, *args: Any, **kwargs: Any) -> Any:
            with shm_full_from_worker():  # the worker's ShmFull, a MemoryError here too
                reply = super().collective_rpc(method, *args, **kwargs)
            attachments = self._spec_compat_attachments
            # a new call: segments whose results are gone go back to the workers for reuse
            if method == RESET_CAPTURE and attachments and (free := attachments.released()):
                super().collective_rpc(RECYCLE_SEGMENTS, args=(free,))
            if kwargs.get(NON_BLOCK):  # a future: pipelined steps collect it later
                return ShmFullOnCollect(reply)
            if method != GET_CAPTURED:
                return reply
            if self._spec_compat_attachments is None:
                self._spec_compat_attachments = Attachments()
            checks = WorkerChecks.kept_on(self)
            for one in reply if isinstance(reply, list) else [reply]:
                if isinstance(one, dict):
                    checks.counts.append(one.pop(WORKER_CHECKED, None))
            return self._spec_compat_attachments.from_descriptors(reply)

        def shutdown(self) -> Any:
            try:
                return super().shutdown()
            finally:
                if self._spec_compat_attachments is not None:
                    self._spec_compat_attachments.close()

    return MultiprocExecutor


PATCH = declare(
    __name__,
    target="MultiprocExecutor",
    summary="read captured states from the workers' shared-memory arena (no pickling)",
)
