"""Answer speculators 0.3.0's ``torch.cuda.mem_get_info()`` on vLLM's CPU platform.

Target: ``vllm_hidden_states_generator.torch`` (speculators 0.3.0), on the CPU platform only.
Why: the stock ``__init__`` sizes the KV cache with ``torch.cuda.mem_get_info()``, which
    raises without an NVIDIA driver (CPU torch builds and CUDA builds on GPU-less hosts).
How: the stock module's ``torch`` is a proxy of the real module whose ``cuda.mem_get_info``
    reports host memory (capped by ``VLLM_CPU_KVCACHE_SPACE``); every other attribute is the
    real torch.  Not applied on GPU platforms.
Upstream change: none in vLLM; the stock code assumes CUDA.
Remove when: the extractor asks the platform for memory (speculators 0.4.x has its own
    ``mem_get_info``; see ``cpu_mem_get_info``).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from spec_compat.engine.names import GENERATOR
from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict
from spec_compat.engine.stock_source import stock_mentions
from spec_compat.patches._cpu import cpu_mem_get_info

CALL = "torch.cuda.mem_get_info"


@functools.cache
def torch_on_cpu() -> type:
    """The proxy classes, made once they are needed (wrapt loads with the patch, not
    apply())."""
    import wrapt

    class _CudaOnCpu(wrapt.ObjectProxy):
        def __init__(self, cuda: Any, cache_fraction: float):
            super().__init__(cuda)
            self._self_cache_fraction = cache_fraction

        def mem_get_info(self, device: Any = None) -> tuple[int, int]:
            return cpu_mem_get_info(self._self_cache_fraction)

    class TorchOnCpu(wrapt.ObjectProxy):
        def __init__(self, torch: Any, cache_fraction: float):
            super().__init__(torch)
            self._self_cuda = _CudaOnCpu(torch.cuda, cache_fraction)

        @property
        def cuda(self) -> Any:
            return self._self_cuda

    return TorchOnCpu


def probe(module: ModuleType) -> Verdict:
    if stock_mentions(module, CALL):
        return Verdict(Need.NEEDED, f"{module.__name__} calls {CALL}", "no CUDA on this platform")
    return Verdict(Need.NOT_NEEDED, f"no {CALL} in {module.__name__}")


def wrap(original: Any) -> Any:
    import sys

    fraction = getattr(sys.modules[GENERATOR], "CACHE_MEMORY_FRACTION", 1.0)
    return torch_on_cpu()(original, fraction)


PATCH = declare(
    __name__,
    target="torch",
    summary="CPU platform: report host memory to 0.3.0's torch.cuda.mem_get_info()",
    speculators="<0.4",
    platform="cpu",
)
