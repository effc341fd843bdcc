"""Random weights from each tensor's name alone: a vLLM load format for architectures with no
checkpoint to build (a config vLLM can read, no class in transformers).

The same config.json in any process (the stock extractor's workers, vLLM's own engine)
gives bitwise the same model, so the extractor's states can be compared with vLLM's own
EAGLE-3 aux hidden states.  vLLM's "dummy" format cannot serve: it seeds every tensor alike
(same-shaped tensors equal, norms ~1e-3), so layers barely move the state.  Here each
tensor draws from a generator seeded by its name: matrices uniform in +-1/sqrt(fan-in),
vector weights (norm scales) near 1, other vectors small; in float32 on the CPU, then cast.

`SPEC_COMPAT_SEEDED_WEIGHTS=1` (set by `use()`, inherited by children) registers the
format in every process that imports vLLM's loaders, spawned workers included (the start-up
hook, `spec_compat.startup`, installs a post-import hook).
"""

from __future__ import annotations

import math
import os
import zlib
from typing import Any

LOAD_FORMAT = "spec_compat_seeded"
ENV = "SPEC_COMPAT_SEEDED_WEIGHTS"
LOADERS = "vllm.model_executor.model_loader"


def seeded(name: str, shape: tuple[int, ...]) -> Any:
    """The float32 values of the tensor called `name`."""
    import torch

    generator = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    uniform = torch.rand(shape, generator=generator, dtype=torch.float32) * 2 - 1
    if len(shape) >= 2:
        return uniform / math.sqrt(shape[-1])
    if name.endswith("weight"):  # a vector of weights scales: norms
        return 1 + 0.1 * uniform
    return 0.1 * uniform


def fill(model: Any) -> None:
    """Every floating-point parameter and persistent buffer of `model`, by its name."""
    import torch

    persistent = dict(model.state_dict(keep_vars=True))
    with torch.no_grad():
        for name, tensor in persistent.items():
            if torch.is_floating_point(tensor) and tensor.numel():
                tensor.copy_(seeded(name, tuple(tensor.shape)).to(tensor.dtype))


def register(_module: Any = None) -> None:
    """vLLM's loader registry learns LOAD_FORMAT (once per process)."""
    from vllm.model_executor import model_loader
    from vllm.model_executor.model_loader.dummy_loader import DummyModelLoader

    if LOAD_FORMAT in getattr(model_loader, "_LOAD_FORMAT_TO_MODEL_LOADER", {}):
        return

    @model_loader.register_model_loader(LOAD_FORMAT)
    class SeededModelLoader(DummyModelLoader):
        def load_weights(self, model: Any, model_config: Any) -> None:
            fill(model)


def register_when_imported() -> None:
    """Register as soon as vLLM's loaders are imported in this process."""
    import wrapt

    wrapt.register_post_import_hook(register, LOADERS)


def use(generator_module: Any) -> None:
    """The stock generator's engine loads seeded weights: its `LoadConfig()` names the
    format, and every process from now on registers it."""
    os.environ[ENV] = "1"
    register_when_imported()
    stock = generator_module.LoadConfig

    def load_config(*args: Any, **kwargs: Any) -> Any:
        return stock(*args, **(kwargs | {"load_format": LOAD_FORMAT}))

    generator_module.LoadConfig = load_config


def native_options(spec: dict[str, Any]) -> dict[str, Any]:
    """vLLM's own engine (`child.py native`) on the same weights, where SPEC asks."""
    if not spec.get("seeded_weights"):
        return {}
    register_when_imported()
    return {"load_format": LOAD_FORMAT}
