"""Use a KV block size that vLLM's CPU attention supports.

Target: ``vllm_hidden_states_generator.CacheConfig`` (speculators 0.3.0 and 0.4.x), on the
    CPU platform only.
Why: the stock code hard-codes ``block_size=16``; recent CPU attention kernels only take
    multiples of 32 (``get_supported_kernel_block_sizes() == [MultipleOf(32)]``), so the
    worker fails with "No common block size for 16 (CPU_ATTN: [MultipleOf(32)])".
How: the stock module's ``CacheConfig`` raises the requested block size to the smallest
    size the installed CPU attention backend declares (16 -> 32).  ``scheduler_block_size``
    then gives the scheduler the same value.  Not applied on GPU platforms.
Upstream change: vLLM's CPU attention backend declared ``MultipleOf(32)`` kernel block
    sizes (seen in 0.32; 0.16 accepted 16).
Remove when: the extractor asks the platform for its block size.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict
from spec_compat.patches._cpu import cpu_attention_backend, cpu_block_size, kernel_block_sizes
from spec_compat.patches._stock import with_kwargs


def probe(module: ModuleType) -> Verdict:
    stock = getattr(module, "VLLM_BLOCK_SIZE", None)
    if not isinstance(stock, int):
        return Verdict(Need.UNKNOWN, "no VLLM_BLOCK_SIZE constant in the stock module")
    sizes = kernel_block_sizes(cpu_attention_backend()) or "any block size"
    found = f"stock block_size={stock}; CPU attention supports {sizes}"
    adjusted = cpu_block_size(stock)
    if adjusted == stock:
        return Verdict(Need.NOT_NEEDED, found)
    return Verdict(Need.NEEDED, found, f"block size {stock} -> {adjusted}")


def wrap(original: Any) -> Any:
    def adjust(kwargs: dict[str, Any]) -> None:
        if kwargs.get("block_size") is not None:
            kwargs["block_size"] = cpu_block_size(kwargs["block_size"])

    return with_kwargs(original, adjust)


PATCH = declare(
    __name__,
    target="CacheConfig",
    summary="CPU platform: a KV block size the CPU attention kernels accept (16 -> 32)",
    platform="cpu",
)
