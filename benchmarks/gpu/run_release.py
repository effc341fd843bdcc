"""Run-time proof of one CUDA vLLM release on a GPU: `bash benchmarks/gpu/run.sh release` on
any CUDA machine with that vLLM installed, or, on a machine without a package registry,
after run_release.sh has unpacked the kit of stage_vllm.sh:

1. the unchanged stock extractor of each speculators line with `spec_compat.apply()` on a
   tiny random Llama (`spec_compat.rehearse.child extract`, one process each, as a user's
   script), against transformers float32: max relative error per layer (pass <= 1e-5) in
   float32, and in bf16 (the stock dtype) next to transformers' own bf16-vs-float32 noise;
2. `benchmarks/gpu/run_h200.py` roles B-shm and N on the harness model (random 0.85 B
   Llama, bf16, 256 prompts): B against vLLM's native extraction, bitwise;
3. "hybrid" (`hybrid_rehearsals.py`): `spec_compat rehearse` on every IsHybrid and
   SupportsEagle3 class of the installed vLLM, each line, against vLLM's own aux states;
4. "families": the test suite's tiny families (FAMILIES, default Qwen3, Qwen3-MoE,
   DeepSeek-V3, gpt-oss) through each line's stock extractor, with vLLM's CUDA kernels under
   `worker_kernel_check`, against vLLM's own aux states (bitwise) and transformers float32.

Writes $OUT/release.json as it goes.  STEPS ("tiny,harness" by default; "hybrid"), DTYPES
and LINES select; a warm machine's next call can run a step the last one left out (the kit
stays unpacked).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
#: the staged kit (run_release.sh); on a machine with vLLM installed, no kit: the
#: interpreter's own packages, and each speculators line from LINES_DIR (run.sh installs them)
KIT = Path(os.environ.get("KIT", "/tmp/kit"))
LINES_DIR = Path(os.environ.get("SPEC_COMPAT_LINES_DIR", KIT / "site"))
OUT = Path(os.environ.get("OUT", "/tmp/out"))
LAYERS = [0, 2, 3]
TOLERANCE = 1e-5


def pythonpath(line: str) -> str:
    """spec_compat from this checkout, one speculators line, and the kit where there is one."""
    paths = [ROOT / "src", LINES_DIR / f"speculators-{line}"]
    paths += [p for p in (KIT / "site", KIT / "torchsite") if p.is_dir()]
    return os.pathsep.join(map(str, paths))


def save(summary: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "release.json").write_text(json.dumps(summary, indent=2, default=str))


def extract(
    line: str,
    model: Path,
    prompts: list[list[int]],
    dtype: str,
    work: Path,
    mode: str = "extract",
    one_a_call: bool = False,
    exclude: str = "",
) -> dict:
    """The stock extractor of `line` (or, `mode="native"`, vLLM's own aux states of each
    prompt alone) in its own process; its results, or its log tail.  `exclude`: patches
    left out (SPEC_COMPAT_EXCLUDE), to show what one fixes."""
    tag = f"{mode}-{line}-{dtype}-{int(one_a_call)}-{exclude}"
    spec = work / f"spec-{tag}.json"
    out = work / f"states-{tag}.pt"
    spec.write_text(
        json.dumps(
            {
                "model": str(model),
                "prompts": prompts,
                "layers": LAYERS,
                "max_model_len": 512,
                "tensor_parallel_size": 1,
                # CALLS=one: a prompt a call (no batch order to get wrong), else one call
                "calls": [[i] for i in range(len(prompts))]
                if one_a_call or os.environ.get("CALLS") == "one"
                else [list(range(len(prompts)))],
                "attention_backend": None,
                "dtype": dtype,  # the engine's (spec_compat.rehearse.child; SC_DTYPE before)
                "out": str(out),
            }
        )
    )
    env = os.environ | {"PYTHONPATH": pythonpath(line), "SC_DTYPE": dtype}
    env["SPEC_COMPAT_EXCLUDE"] = exclude
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "spec_compat.rehearse.child", mode, str(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=float(os.environ.get("EXTRACT_TIMEOUT_S", "240")),
    )
    seconds = time.perf_counter() - started
    if proc.returncode != 0 or not out.exists():
        with open(OUT / "failures.log", "a") as log:
            log.write(f"===== {line} {dtype} rc={proc.returncode}\n{proc.stderr[-200_000:]}\n")
            log.write(f"----- stdout\n{proc.stdout[-50_000:]}\n")
        from run_h200 import error_lines

        errors = error_lines(proc.stderr, 15)
        return {"failed": proc.returncode, "errors": errors, "seconds": seconds}
    import torch

    data = torch.load(out)
    if mode == "native":  # [[state per layer] per prompt]
        data = {
            "results": [
                {"input_ids": torch.tensor(p), "hidden_states": h}
                for p, h in zip(prompts, data, strict=True)
            ]
        }
    runner = "V2" if "V2 Model Runner" in proc.stderr + proc.stdout else "V1 or unsaid"
    backend = sorted(
        {
            ln.split("Using ")[-1]
            for ln in proc.stderr.splitlines()
            if "backend" in ln and "Using " in ln
        }
    )
    return {
        "results": data["results"],
        "seconds": seconds,
        "backend_lines": backend[-4:],
        "runner": runner,
    }


def main() -> None:
    import torch

    summary: dict = {"torch": torch.__version__, "device": torch.cuda.get_device_name()}
    import vllm

    summary["vllm"] = vllm.__version__
    steps = os.environ.get("STEPS", "tiny,harness").split(",")
    if "tiny" in steps:
        tiny(summary)
    if "native" in steps:
        native_parity(summary)
    if "harness" in steps:
        harness(summary)
    if "families" in steps:
        families(summary)
    if "hybrid" in steps:
        import hybrid_rehearsals

        hybrid_rehearsals.run(summary, pythonpath, save)
    print(json.dumps(summary, indent=2, default=str), flush=True)


def tiny(summary: dict) -> None:
    """Step 1: the tiny Llama through each line's stock extractor, against transformers."""
    from e2e import tiny_models
    from spec_compat.rehearse import rehearsal
    from spec_compat.rehearse.child import oracle

    work = Path(tempfile.mkdtemp(prefix="release-"))
    model = tiny_models.build_llama(work / "tiny-llama")
    prompts = tiny_models.random_prompts(14, 2, 255)
    expected = oracle(model, prompts, LAYERS)  # transformers, float32, CPU
    summary["oracle"] = "transformers float32 (CPU), tiny random Llama, 14 prompts, layers 0,2,3"
    lines = os.environ.get("LINES", "0.3.0,0.4.0.1").split(",")
    for dtype in os.environ.get("DTYPES", "float32,bfloat16").split(","):
        for line in lines:
            run = extract(line, model, prompts, dtype, work)
            record = {k: v for k, v in run.items() if k != "results"}
            if "results" in run:
                try:
                    worst = rehearsal.worst_error(run["results"], prompts, expected, tolerance=1.0)
                    record["max_relative_error"], record["where"] = worst
                    record["pass"] = worst[0] <= TOLERANCE if dtype == "float32" else None
                except rehearsal.Stop as stop:
                    record["mismatch"] = str(stop)
            summary[f"{line} {dtype}"] = record
            print(f"speculators {line} {dtype}: {record}", flush=True)
            save(summary)
    summary["bf16_noise_transformers"] = bf16_noise(model, prompts, expected)
    save(summary)


def on_cpu(results: list[dict]) -> list[dict]:
    """Results with every tensor on the CPU (vLLM's native states stay on the GPU)."""

    def moved(value):
        if isinstance(value, list):
            return [moved(v) for v in value]
        return value.cpu() if hasattr(value, "cpu") else value

    return [{k: moved(v) for k, v in r.items()} for r in results]


def bitwise(a: list[dict], b: list[dict]) -> dict:
    """How two runs' states compare: equal tensors, and the worst relative difference."""
    from spec_compat.rehearse.rehearsal import relative_error

    pairs = [
        (x, y)
        for ra, rb in zip(on_cpu(a), on_cpu(b), strict=True)
        for x, y in zip(ra["hidden_states"], rb["hidden_states"], strict=True)
    ]
    equal = sum(bool(x.equal(y)) for x, y in pairs)
    worst = max(relative_error(y.float(), x.float()) for x, y in pairs)
    return {"equal_states": f"{equal}/{len(pairs)}", "max_relative_difference": worst}


def against(results: list[dict], prompts: list[list[int]], expected: list) -> float | str:
    """The worst relative error against transformers, or why the results are not those
    prompts' (their number, order or shapes)."""
    from spec_compat.rehearse import rehearsal

    try:
        return rehearsal.worst_error(on_cpu(results), prompts, expected, tolerance=1.0)[0]
    except rehearsal.Stop as stop:
        return f"mismatch: {stop}"


def native_parity(summary: dict) -> None:
    """Step "native" (vLLM 0.34, Model Runner V2): each line's stock extractor against
    vLLM's own EAGLE-3 aux states of each prompt alone (spec_compat.rehearse.child native),
    all prompts in one call, then each line without `cache_config_extensible_kv_cache` (what
    it fixes), then a prompt a call; most telling first, each result saved as it comes."""
    from e2e import tiny_models
    from spec_compat.rehearse.child import oracle

    work = Path(tempfile.mkdtemp(prefix="native-"))
    model = tiny_models.build_llama(work / "tiny-llama")
    prompts = tiny_models.random_prompts(14, 2, 255)
    expected = oracle(model, prompts, LAYERS)
    lines = os.environ.get("LINES", "0.3.0,0.4.0.1").split(",")
    for dtype in os.environ.get("DTYPES", "float32").split(","):
        native = extract("0.4.0.1", model, prompts, dtype, work, mode="native")
        summary[f"native {dtype}"] = {k: v for k, v in native.items() if k != "results"}
        if "results" in native:
            summary[f"native {dtype}"]["vs transformers"] = against(
                native["results"], prompts, expected
            )
        save(summary)
        plan = [(line, False, "") for line in lines]
        plan += [(line, False, "cache_config_extensible_kv_cache") for line in lines]
        plan += [(line, True, "") for line in lines]
        for line, one, exclude in plan:
            run = extract(line, model, prompts, dtype, work, one_a_call=one, exclude=exclude)
            key = f"{line} {dtype} {'a prompt a call' if one else 'one call'}"
            key += f" without {exclude}" if exclude else ""
            record = {k: v for k, v in run.items() if k != "results"}
            if "results" in run:
                if "results" in native:
                    record |= bitwise(run["results"], native["results"])
                record["vs transformers"] = against(run["results"], prompts, expected)
            summary[key] = record
            print(key, record, flush=True)
            save(summary)


def families(summary: dict) -> None:
    """Step "families": each tiny family, each line, one call of all prompts, against vLLM's
    own aux states of each prompt alone and against transformers float32."""
    from e2e import tiny_models
    from spec_compat.rehearse.child import oracle

    work = Path(tempfile.mkdtemp(prefix="families-"))
    prompts = tiny_models.random_prompts(12, 2, 150, seed=11)
    lines = os.environ.get("LINES", "0.3.0,0.4.0.1").split(",")
    wanted = os.environ.get("FAMILIES", "qwen3,qwen3_moe,deepseek_v3,gpt_oss").split(",")
    for family in wanted:
        model = tiny_models.BUILDERS[family](work / f"tiny-{family}")
        expected = oracle(model, prompts, LAYERS)
        for dtype in os.environ.get("DTYPES", "float32,bfloat16").split(","):
            native = extract("0.4.0.1", model, prompts, dtype, work, mode="native")
            key = f"{family} {dtype}"
            summary[f"{key} native"] = {k: v for k, v in native.items() if k != "results"}
            if "results" in native:
                summary[f"{key} native"]["vs transformers"] = against(
                    native["results"], prompts, expected
                )
            for line in lines:
                run = extract(line, model, prompts, dtype, work)
                record = {k: v for k, v in run.items() if k != "results"}
                if "results" in run:
                    if "results" in native:
                        record |= bitwise(run["results"], native["results"])
                    record["vs transformers"] = against(run["results"], prompts, expected)
                summary[f"{key} {line}"] = record
                print(f"{key} {line}: {record}", flush=True)
                save(summary)


def harness(summary: dict) -> None:
    """Step 2: run_h200.py's B-shm (0.4.0.1) and N on the harness model, B vs N bitwise."""
    env = os.environ | {"ROLES": os.environ.get("ROLES", "B-shm,N"), "ROUNDS": "1"}
    env["PYTHONPATH"] = pythonpath("0.4.0.1")
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu" / "run_h200.py")],
        env=env,
        capture_output=True,
        text=True,
    )
    harness = json.loads((OUT / "h200.json").read_text()) if (OUT / "h200.json").exists() else {}
    summary["harness"] = {
        "rc": proc.returncode,
        "seconds": time.perf_counter() - started,
        "median_tokens_per_s": harness.get("median_tokens_per_s"),
        "parity_B-shm_vs_N": harness.get("parity_B-shm_vs_N_first_8_prompts"),
        "failed_roles": [r["role"] for r in harness.get("runs", []) if "failed" in r],
    }
    print(proc.stdout[-6000:], proc.stderr[-3000:], flush=True)
    save(summary)


def bf16_noise(model: Path, prompts: list[list[int]], expected: list) -> float:
    """transformers' bf16 forward against its float32 one, max relative error: the size of
    difference a bf16 engine shows against the float32 oracle."""
    import torch
    from transformers import AutoModelForCausalLM

    from spec_compat.rehearse import rehearsal
    from spec_compat.rehearse.child import decoder_layers

    torch.backends.cudnn.enabled = False  # the image's cuDNN is older than torch's (9.19)
    lm = AutoModelForCausalLM.from_pretrained(model, torch_dtype=torch.bfloat16).cuda().eval()
    layers_of = decoder_layers(lm)
    captured: dict[int, torch.Tensor] = {}
    for k in LAYERS:
        layers_of[k].register_forward_hook(
            lambda _m, _i, out, k=k: captured.__setitem__(
                k, out[0] if isinstance(out, tuple) else out
            )
        )
    results = []
    with torch.no_grad():
        for ids in prompts:
            lm(input_ids=torch.tensor([ids], device="cuda"))
            states = [captured[k][0].float().cpu() for k in LAYERS]
            results.append({"input_ids": torch.tensor(ids), "hidden_states": states})
    return rehearsal.worst_error(results, prompts, expected, tolerance=1.0)[0]


if __name__ == "__main__":
    main()
