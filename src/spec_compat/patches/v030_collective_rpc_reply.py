"""Give speculators 0.3.0 the one-element reply list it indexes with ``[0]``.

Target: ``vllm_hidden_states_generator.MultiprocExecutor`` (speculators 0.3.0).
Why: up to vLLM 0.11.0 ``collective_rpc(..., unique_reply_rank=0)`` returned a one-element
    list; from 0.11.1 it returns the reply itself.  The 0.3.0 driver still does
    ``collective_rpc("_get_captured_states", unique_reply_rank=0)[0]``, which now takes the
    *first layer's tensor* instead of the list of layers: silently wrong hidden states (with
    one layer requested it does not even raise).
How: the stock module's ``MultiprocExecutor`` is a subclass whose ``collective_rpc`` wraps the
    unique reply of the stock ``_get_captured_states`` call back into a list (vLLM's own
    internal calls through the same method are left bare).  The reply shape cannot be told
    from a signature (the payload is itself a list), so the probe defers to the vLLM range;
    at run time the
    ``_get_captured_states`` payload is checked to be a list of tensors (or ``None``) before
    it is wrapped, and anything else raises.
Upstream change: vLLM 0.11.1 ``v1/executor/multiproc_executor.py``:
    ``return responses[0] if output_rank is not None else responses``.
Remove when: speculators 0.3.0 is no longer used (0.4.x expects the bare reply).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.names import GET_CAPTURED
from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict, signature_text
from spec_compat.patches._stock import parameters


def _installed() -> Any:
    from vllm.v1.executor.multiproc_executor import MultiprocExecutor

    return MultiprocExecutor


def probe(module: ModuleType) -> Verdict:
    rpc = _installed().collective_rpc
    found = signature_text(rpc)
    if "unique_reply_rank" not in parameters(rpc):
        return Verdict(Need.UNKNOWN, found, "collective_rpc lost unique_reply_rank")
    return Verdict(Need.UNDECIDED, found, "reply shape is not visible in the signature")


def check_capture_payload(reply: Any) -> None:
    import torch

    if reply is None:
        return
    if isinstance(reply, list) and all(isinstance(t, torch.Tensor) for t in reply):
        return
    raise RuntimeError(
        f"spec_compat[{PATCH.name}]: expected the worker's list of per-layer tensors from "
        f"{GET_CAPTURED}, got {type(reply).__name__} "
        f"{[type(x).__name__ for x in reply] if isinstance(reply, list) else ''}; "
        "refusing to hand possibly misattributed hidden states to the stock code"
    )


def wrap(original: type) -> type:
    class MultiprocExecutor(original):  # type: ignore[misc, valid-type]
        def collective_rpc(self, method: Any, *args: Any, **kwargs: Any) -> Any:
            reply = super().collective_rpc(method, *args, **kwargs)
            # Only the stock call: vLLM's own execute_model/sample_tokens use unique replies
            # through this same method and expect them bare.
            if method != GET_CAPTURED or kwargs.get("unique_reply_rank") is None:
                return reply
            check_capture_payload(reply)
            return [reply]

    return MultiprocExecutor


PATCH = declare(
    __name__,
    target="MultiprocExecutor",
    summary="speculators 0.3.0: wrap unique collective_rpc replies in a list (silent "
    "wrong-layer bug)",
    speculators="<0.4",
    vllm=">=0.11.1",
    after=("shm_transport_driver",),  # checks and wraps tensors, not the transport's descriptors
)
