"""Refuse a ``tensor_parallel_size`` no device here can serve, before anything loads.

Target: ``vllm_hidden_states_generator.VllmHiddenStatesGenerator.__init__`` (both lines).
Why: speculators' data script defaults ``--tensor-parallel-size`` to
    ``torch.accelerator.device_count()``, which is 0 on a machine without a GPU; the stock
    generator passes it on and vLLM dies deep inside with ``ZeroDivisionError: integer modulo
    by zero``.  More ranks than visible GPUs fail only after the workers start.
How: before the stock ``__init__`` runs, the value must be an integer >= 1 and, on a CUDA
    platform, at most the number of visible devices; otherwise ``ValueError`` names the
    value, where a 0 comes from when that is known, and what to pass.  vLLM's CPU platform
    runs any rank count (one process per rank).
Upstream change: none; the stock extractor never checked.
Remove when: the extractor validates its own arguments.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Verdict
from spec_compat.patches._stock import checked_init, generator_init_probe

ARGUMENT = "tensor_parallel_size"


def visible_gpus() -> int | None:
    """CUDA devices a rank can use, or None on a platform that is not CUDA (CPU: any)."""
    import torch
    from vllm.platforms import current_platform

    return torch.cuda.device_count() if current_platform.is_cuda_alike() else None


def check(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        origin = ""
        if value == 0:
            import torch

            if torch.accelerator.device_count() == 0:
                origin = (
                    " (that is torch.accelerator.device_count() on this machine, which has no "
                    "GPU: speculators' data_generation_offline.py uses it as the default of "
                    "--tensor-parallel-size)"
                )
        raise ValueError(
            f"{ARGUMENT}={value!r}{origin}: pass {ARGUMENT}=1 (--tensor-parallel-size 1), "
            "or the number of GPUs to shard the model over"
        )
    gpus = visible_gpus()
    if gpus is not None and value > gpus:
        raise ValueError(
            f"{ARGUMENT}={value} but {gpus} GPU(s) are visible here "
            f"(CUDA_VISIBLE_DEVICES decides which): pass {ARGUMENT} <= {gpus}"
        )


def probe(module: ModuleType) -> Verdict:
    return generator_init_probe(
        module, {ARGUMENT}, f"the stock __init__ passes {ARGUMENT} on unchecked"
    )


def wrap(original: Any) -> Any:
    return checked_init(original, lambda args: check(args[ARGUMENT]))


PATCH = declare(
    __name__,
    target="VllmHiddenStatesGenerator.__init__",
    summary="refuse tensor_parallel_size 0 (no GPU) or above the visible GPUs, before loading",
)
