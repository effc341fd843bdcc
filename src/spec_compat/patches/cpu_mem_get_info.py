"""Answer speculators 0.4.x's ``mem_get_info()`` on vLLM's CPU platform.

Target: ``vllm_hidden_states_generator.mem_get_info`` (speculators 0.4.x), CPU platform only.
Why: speculators 0.4.x's ``mem_get_info`` returns ``(0, 0)`` on a CPU torch build, so the KV
    cache gets zero blocks and the scheduler asserts; on a CUDA build without a driver it
    raises.
How: the stock module's ``mem_get_info`` reports host memory, capped so the KV cache stays
    within ``VLLM_CPU_KVCACHE_SPACE`` GiB when that is set.  Not applied on GPU platforms.
Upstream change: none in vLLM; the stock code knows CUDA and NPU only.
Remove when: the extractor asks the vLLM platform for memory.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from spec_compat.engine.names import GENERATOR
from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict, signature_text
from spec_compat.patches._cpu import cpu_mem_get_info


def probe(module: ModuleType) -> Verdict:
    stock = getattr(module, "mem_get_info", None)
    if stock is None:
        return Verdict(Need.NOT_NEEDED, f"no mem_get_info in {module.__name__}")
    return Verdict(Need.NEEDED, signature_text(stock), "CUDA/NPU only")


def wrap(original: Any) -> Any:
    fraction = getattr(sys.modules[GENERATOR], "CACHE_MEMORY_FRACTION", 1.0)

    def mem_get_info(*args: Any, **kwargs: Any) -> tuple[int, int]:
        return cpu_mem_get_info(fraction)

    return mem_get_info


PATCH = declare(
    __name__,
    target="mem_get_info",
    summary="CPU platform: report host memory to 0.4.x's mem_get_info()",
    speculators=">=0.4",
    platform="cpu",
)
