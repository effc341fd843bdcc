"""Let speculators 0.4.x's data config name the device on a machine without a GPU.

Target: ``speculators.data_generation.config_generator.get_device_name`` (speculators 0.4.x).
Why: the upstream data script ends by writing ``data_config.json`` through
    ``DataGenerationConfig.from_generator``, whose ``_get_gpu_info`` calls
    ``get_device_name(0)``.  With PyPI's (CUDA) torch on a host without a GPU,
    ``torch.accelerator.current_accelerator()`` still says ``cuda`` and the call raises
    ``RuntimeError: Found no NVIDIA driver``: after every sample was saved, the run exits 1
    with no config.  (0.3.0 asks ``torch.cuda.is_available()`` first.)
How: the config module's ``get_device_name`` answers the stock ``"NO ACCELERATOR"`` (so the
    config says "CPU ONLY") when ``torch.accelerator.device_count()`` is 0, and calls the
    stock function otherwise.  Probe: needed only where the stock call would raise (an
    accelerator type with no device).
Upstream change: none in vLLM; speculators 0.4.0 (``speculators/utils/util.py``).
Remove when: speculators checks the device count before naming device 0.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict

CONFIG = "speculators.data_generation.config_generator"


def probe(module: ModuleType) -> Verdict:
    import torch

    if not callable(getattr(module, "get_device_name", None)):
        return Verdict(Need.NOT_NEEDED, f"{CONFIG} has no get_device_name (0.3.0)")
    accelerator = torch.accelerator.current_accelerator()
    found = f"accelerator {accelerator}, {torch.accelerator.device_count()} device(s)"
    if accelerator is not None and torch.accelerator.device_count() == 0:
        return Verdict(Need.NEEDED, found, "get_device_name(0) raises without a device")
    return Verdict(Need.NOT_NEEDED, found)


def wrap(original: Any) -> Any:
    def get_device_name(idx: int) -> str:
        import torch

        if torch.accelerator.device_count() == 0:
            return "NO ACCELERATOR"  # the stock answer without an accelerator
        return original(idx)

    return get_device_name


PATCH = declare(
    __name__,
    module=CONFIG,
    target="get_device_name",
    summary="name no device in data_config.json on a host without a GPU (0.4.x)",
    speculators=">=0.4",
)
