"""What a rehearsal compares: the stock extractor's states and an independent reference.

    python -m spec_compat.rehearse.child extract|native SPEC.json [PREFLIGHT.json]

Each runs in its own process, as a user's script does.  `extract` runs speculators' stock
`VllmHiddenStatesGenerator` under `spec_compat.apply()`; `native` asks vLLM's own EAGLE-3
aux hidden states for the same layers (vLLM's id k is the state entering layer k, so
speculators' id + 1; one past the last layer is the state before the final norm: where a
release records aux states only before each layer, it is taken from the last layer's
output, `hidden_states + residual`), each prompt alone.  Both run in float32 (`dtype`).  The
patch selection is the environment's (SPEC_COMPAT_ONLY / SPEC_COMPAT_EXCLUDE).
SPEC: {"model", "prompts", "layers", "max_model_len", "tensor_parallel_size", "calls":
[[prompt indices]...], "attention_backend", "dtype", "model_options", "out"}.
With PREFLIGHT (`{"architectures"}`) the child first writes beside SPEC what only the
installed vLLM can say (`*.route.json`: the capture's route, the platform), then waits for
SPEC to appear: a rehearsal imports vLLM once, in the process that runs the engine.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any


def oracle(model: Path, prompts: list[list[int]], layers: list[int]) -> list[list[Any]]:
    """transformers' output of each decoder layer `k` (before the final norm), per prompt.

    speculators' layer k capture is `hidden_states[k + 1]` for every layer but the last,
    whose `hidden_states` entry is after the norm: forward hooks on the layers give all of
    them before the norm, checked against `hidden_states` where that has them.
    """
    import torch
    from transformers import AutoModelForCausalLM

    config = json.loads((Path(model) / "config.json").read_text())
    if "text_config" in config:  # a multimodal wrapper: its text path is the oracle
        from transformers import AutoModelForImageTextToText as auto
    else:
        auto = AutoModelForCausalLM
    lm = auto.from_pretrained(model, torch_dtype=torch.float32).eval()
    layers_of = decoder_layers(lm)
    captured: dict[int, Any] = {}
    hooks = [
        layers_of[k].register_forward_hook(
            lambda _m, _i, out, k=k: captured.__setitem__(
                k, out[0] if isinstance(out, tuple) else out
            )
        )
        for k in set(layers)
    ]
    expected = []
    try:
        with torch.no_grad():
            for ids in prompts:
                outputs = lm(input_ids=torch.tensor([ids]), output_hidden_states=True)
                per_layer = [captured[k][0].clone() for k in layers]
                for k, state in zip(layers, per_layer, strict=True):
                    if k + 1 < len(outputs.hidden_states) - 1:
                        assert torch.equal(state, outputs.hidden_states[k + 1][0])
                expected.append(per_layer)
    finally:
        for h in hooks:
            h.remove()
    return expected


def decoder_layers(lm: Any) -> Any:
    """The decoder's layer list, whatever the family calls it (`layers`, `h`, ...)."""
    import torch

    text = getattr(lm.config, "text_config", None) or lm.config
    count = text.num_hidden_layers
    root = lm.get_decoder() if hasattr(lm, "get_decoder") else lm  # not a vision tower
    for module in root.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == count:
            return module
    raise LookupError(f"{type(lm).__name__}: no list of {count} decoder layers")


def _apply_selection() -> None:
    """`spec_compat.apply()` with the selection the real run will use (`spec-compat run`
    reads the same variables)."""
    from spec_compat import api
    from spec_compat.engine.selection import from_user

    api.apply(**from_user())


def float32_engine(
    generator_module: ModuleType,
    model_options: dict[str, Any] | None = None,
    attention_backend: str | None = None,
    dtype: str = "float32",
) -> None:
    """The stock generator's engine in float32 (the stock dtype="auto" runs a float32
    checkpoint in bf16), in this process only; `model_options` go to its ModelConfig too, an
    attention backend is pinned where given (vLLM's AMX MLA is bf16 only), and `dtype`
    replaces float32 where vLLM's kernels refuse it.  Workers follow the driver's config."""
    stock_model_config = generator_module.ModelConfig
    stock_vllm_config = generator_module.VllmConfig
    forced = {"dtype": dtype} | (model_options or {})

    def model_config(*args: Any, **kwargs: Any) -> Any:
        return stock_model_config(*args, **(kwargs | forced))

    generator_module.ModelConfig = model_config
    if attention_backend:
        from vllm.config import AttentionConfig

        pinned = {"attention_config": AttentionConfig(backend=attention_backend)}

        def vllm_config(*args: Any, **kwargs: Any) -> Any:
            return stock_vllm_config(*args, **(kwargs | pinned))

        generator_module.VllmConfig = vllm_config


def _extract(spec: dict[str, Any]) -> Any:
    from speculators.data_generation import vllm_hidden_states_generator as gen

    float32_engine(
        gen,
        spec.get("model_options"),
        attention_backend=spec.get("attention_backend"),
        dtype=spec.get("dtype", "float32"),
    )
    step = {"max_num_batched_tokens": n} if (n := spec.get("max_num_batched_tokens")) else {}
    generator = gen.VllmHiddenStatesGenerator(
        spec["model"],
        layer_ids=spec["layers"],
        max_model_len=spec["max_model_len"],
        tensor_parallel_size=spec["tensor_parallel_size"],
        **step,  # speculators 0.4.x only: 0.3.0 refuses it, as it should
    )
    results = []
    for call in spec["calls"]:
        for r in generator.generate([spec["prompts"][i] for i in call]):
            results.append({"input_ids": r["input_ids"], "hidden_states": r["hidden_states"]})
    layers = list(generator.layer_ids)
    generator.executor.shutdown()
    return {"results": results, "layers": layers}


def _native(spec: dict[str, Any]) -> Any:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the model in this process
    import torch
    from vllm import LLM, SamplingParams
    from vllm.platforms import current_platform

    from spec_compat.rehearse.seeded_weights import native_options

    options = native_options(spec)
    if backend := spec.get("attention_backend"):
        from vllm.config import AttentionConfig

        options["attention_config"] = AttentionConfig(backend=backend)
    if n := spec.get("max_num_batched_tokens"):
        options["max_num_batched_tokens"] = n
    if not current_platform.is_cpu():  # beside the extractor's engine on the same GPU
        options |= {"gpu_memory_utilization": 0.05, "kv_cache_memory_bytes": 1 << 30}
    llm = LLM(
        spec["model"],
        enforce_eager=True,
        max_model_len=spec["max_model_len"],
        tensor_parallel_size=spec.get("tensor_parallel_size", 1),
        enable_prefix_caching=False,
        # float32 unless the spec or its model options (which win, as in the extractor) say
        **({"dtype": spec.get("dtype", "float32")} | options | spec.get("model_options", {})),
    )
    native_ids = tuple(k + 1 for k in spec["layers"])
    # asked for in ascending order, once each: vLLM's own decoders return aux states in layer
    # order, its transformers backend in the order asked (the caller's order came back
    # permuted there, a false mismatch)
    ascending = tuple(sorted(set(native_ids)))

    # module-level callables: some releases pickle what apply_model is handed
    llm.apply_model(functools.partial(_install_reference, ascending))
    results = []
    # greedy: vLLM's CPU top-k/top-p sampler is compiled by torch on first use (150 s)
    greedy = SamplingParams(max_tokens=1, temperature=0.0)
    for ids in spec["prompts"]:
        llm.generate([{"prompt_token_ids": ids}], greedy, use_tqdm=False)
        # the prefill's steps (one unless a step size cuts the prompt); no decode step runs
        steps = llm.apply_model(_take_reference)[0]
        prefill = [torch.cat([s[ascending.index(i)] for s in steps]) for i in native_ids]
        assert all(state.shape[0] == len(ids) for state in prefill), "rows missing or extra"
        results.append(prefill)
    return results


def _install_reference(ascending: tuple[int, ...], model: Any) -> None:
    """Aux states as vLLM's EAGLE-3 path asks for them: on the decoder where it holds
    `aux_hidden_state_layers`, else through the model's `set_aux_hidden_state_layers`
    (vLLM's transformers backend records them in the model's forward)."""
    from spec_compat.models.decoder import find_decoder

    decoder = holder = find_decoder(model)
    # the layers one module deeper: Plamo3Model.layers is a Plamo3Decoder, which holds
    # the layer list and records the aux states that Plamo3Model's forward returns
    while holder is not None and hasattr(holder.layers, "layers"):
        holder = holder.layers
    if holder is not None and hasattr(holder, "aux_hidden_state_layers"):
        holder.aux_hidden_state_layers = ascending
        target = decoder
    else:
        model.set_aux_hidden_state_layers(ascending)
        target = model
    forward = target.forward
    model._reference_steps = []
    past_last = holder is not None and len(holder.layers) == ascending[-1]
    if past_last:  # independent of the capture's own fallback (the final norm's input)
        holder.layers[-1].register_forward_hook(
            lambda _m, _i, out: setattr(model, "_reference_last", _entering_norm(out))
        )

    def forward_keeping_aux(*args, **kwargs):
        output = forward(*args, **kwargs)
        if not isinstance(output, tuple):
            raise RuntimeError(f"{type(target).__name__} has no native aux hidden states")
        hidden, aux = output
        aux = list(aux)
        if past_last and len(aux) == len(ascending) - 1:  # recorded before layers only
            aux.append(model._reference_last)
        model._reference_steps.append([a.clone() for a in aux])
        return hidden

    target.forward = forward_keeping_aux


def _take_reference(model: Any) -> list[Any]:
    steps, model._reference_steps = model._reference_steps, []
    return steps


def _entering_norm(layer_output: Any) -> Any:
    """The state a decoder layer hands on: `hidden_states + residual` (vLLM's layers return
    both and add them in the next fused add-norm), or the bare tensor."""
    if isinstance(layer_output, tuple) and len(layer_output) == 2:
        hidden, residual = layer_output
        return hidden.clone() if residual is None else hidden + residual
    if isinstance(layer_output, tuple):
        raise RuntimeError(f"a decoder layer returned {len(layer_output)} values")
    return layer_output.clone()


def preflight(architectures: list[str]) -> dict[str, Any]:
    """What only the installed vLLM can say before a model is built: the capture's route,
    whether this is a CPU build with MLA attention, and whether a wrapper can be served as
    a language model."""
    import importlib.util
    from dataclasses import asdict

    from vllm.config import ModelConfig
    from vllm.platforms import current_platform

    from spec_compat.models.support import route

    return {
        "route": asdict(route(architectures)),
        "cpu": current_platform.is_cpu(),
        "cpu_mla_backend": importlib.util.find_spec("vllm.v1.attention.backends.mla.cpu_mla")
        is not None,
        "language_model_only": "language_model_only" in ModelConfig.__dataclass_fields__,
    }


def _await(spec_file: Path) -> dict[str, Any]:
    """SPEC once the parent has written it; gone with the parent."""
    parent = os.getppid()
    while not spec_file.exists():
        if os.getppid() != parent:
            sys.exit("spec_compat.rehearse.child: the rehearsal stopped")
        time.sleep(0.05)
    return json.loads(spec_file.read_text())


def write_atomically(path: Path, data: Any) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data))
    partial.replace(path)


def main(argv: list[str]) -> None:
    mode, spec_file, *preflight_file = argv
    spec_file = Path(spec_file)
    run = {"extract": _extract, "native": _native}[mode]
    if mode == "extract":
        _apply_selection()
    if preflight_file:
        asked = json.loads(Path(preflight_file[0]).read_text())
        write_atomically(route_file(spec_file), preflight(asked["architectures"]))
    if mode == "extract":  # the rest of the import, while the parent builds the copy
        from speculators.data_generation import vllm_hidden_states_generator  # noqa: F401
    spec = _await(spec_file)
    import torch

    torch.save(run(spec), spec["out"])


def route_file(spec_file: Path) -> Path:
    return spec_file.with_suffix(".route.json")


if __name__ == "__main__":
    # through the importable module, so that what apply_model pickles names it, not __main__
    from spec_compat.rehearse.child import main as importable_main

    importable_main(sys.argv[1:])
