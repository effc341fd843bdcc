"""Driver half of the shared-memory transport for captured hidden states.

Target: ``vllm_hidden_states_generator.MultiprocExecutor`` (speculators 0.3.0 and 0.4.x).
Why: see ``shm_transport_worker``: pickling the captured states through ``collective_rpc``
    dominates the stock extractor's time.
How: the stock module's ``MultiprocExecutor`` is a subclass whose ``collective_rpc`` turns
    the ``ArenaTensor`` descriptors of a ``_get_captured_states`` reply into views of the
    worker's shared-memory arena (attached once, reused); the stock driver then clones them
    as it always did, so results own their memory and are bitwise the stock values.  A
    reply without descriptors (the worker fell back) passes through untouched.  Attachments
    close on ``shutdown()`` and at exit.
Upstream change: none.
Remove when: see ``shm_transport_worker``.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ..gates import Need, Verdict
from ..registry import Patch
from ..transport import Attachments, shm_free_bytes
from ._stock import GENERATOR, named_adapter


def probe(module: ModuleType) -> Verdict:
    if shm_free_bytes() == 0:
        return Verdict(Need.NOT_NEEDED, "no /dev/shm here: the stock RPC path stays")
    return Verdict(Need.NEEDED, f"/dev/shm free: {shm_free_bytes() >> 20} MiB", "faster path")


def wrap(original: type) -> type:
    class MultiprocExecutor(original):  # type: ignore[misc, valid-type]
        _spec_compat_attachments: Attachments | None = None

        def collective_rpc(self, method: Any, *args: Any, **kwargs: Any) -> Any:
            reply = super().collective_rpc(method, *args, **kwargs)
            if method != "_get_captured_states" or kwargs.get("non_block"):
                return reply
            if self._spec_compat_attachments is None:
                self._spec_compat_attachments = Attachments()
            return self._spec_compat_attachments.from_descriptors(reply)

        def shutdown(self) -> Any:
            try:
                return super().shutdown()
            finally:
                if self._spec_compat_attachments is not None:
                    self._spec_compat_attachments.close()

    return named_adapter(MultiprocExecutor, original, PATCH.name)


PATCH = Patch(
    name="shm_transport_driver",
    side="driver",
    module=GENERATOR,
    target="MultiprocExecutor",
    summary="read captured states from the workers' shared-memory arena (no pickling)",
    probe=probe,
    wrap=wrap,
)
