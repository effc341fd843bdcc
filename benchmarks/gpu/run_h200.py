"""The H200 experiment: bare vLLM prefill (A) vs the stock extractor with spec_compat (B),
with the stock RPC transport and with the shared-memory transport, same model and prompts;
then a bitwise comparison of the two transports' outputs.

Runs on the device machine after the kit is unpacked (see run_h200.sh).  Prints one JSON
line per measurement and a summary; writes $OUT/h200.json.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
LAYERS = [2, 8, 13, 15]
TRANSPORT = ["shm_transport_driver", "shm_transport_worker"]
CHECKS = ["generate_checks"]  # B-shm-nochecks: what the NaN/zero/row checks cost
#: copy threads of the B-shm variants (default: 4, a layer each)
ROLE_ENV = {
    "B-shm-t8": {"SPEC_COMPAT_COPY_THREADS": "8"},
    "B-shm-t2": {"SPEC_COMPAT_COPY_THREADS": "2"},
}


def build_model(directory: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from e2e import tiny_models

    directory.mkdir(parents=True, exist_ok=True)
    tiny_models.build_tokenizer(directory)
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=8,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(directory, safe_serialization=True)


def prompts(count: int = 256, low: int = 512, high: int = 2048) -> list[list[int]]:
    import random

    rng = random.Random(5)
    return [[rng.randrange(4, 32000) for _ in range(rng.randint(low, high))] for _ in range(count)]


def peak_gpu(worker=None) -> int:  # runs in the worker through collective_rpc
    import torch

    return int(torch.cuda.max_memory_allocated())


def transport_layout(worker=None):  # runs in the worker through collective_rpc
    pool = getattr(worker, "_spec_compat_pool", None)
    return {
        "layout": getattr(worker, "_spec_compat_layout", None),
        "segments_reused": getattr(pool, "reused", 0),
        "segments_held": len(getattr(pool, "handed", ())) + len(getattr(pool, "spare", ())),
    }


def measure(role: str, model: str, rounds: int, out: str | None) -> None:
    data = prompts()
    tokens = sum(map(len, data))
    times = []
    if role.startswith("A"):
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        # A: vLLM's defaults; A-stock-settings: the engine settings the stock extractor
        # uses (eager, 32 sequences, 8,192-token steps), to separate engine from shim
        settings = {"enforce_eager": True, "max_num_seqs": 32, "max_num_batched_tokens": 8192}
        extra = settings if role == "A-stock-settings" else {}
        llm = LLM(model=model, max_model_len=2048, enable_prefix_caching=False, **extra)
        inputs = [TokensPrompt(prompt_token_ids=p) for p in data]
        params = SamplingParams(max_tokens=1, temperature=0.0)
        llm.generate(inputs[:8], params, use_tqdm=False)
        for _ in range(rounds):
            started = time.perf_counter()
            llm.generate(inputs, params, use_tqdm=False)
            times.append(time.perf_counter() - started)
        gpu_peak = None
    else:
        import spec_compat

        stock = role.startswith("B-stock")
        spec_compat.apply(exclude=TRANSPORT if stock else {"B-shm-nochecks": CHECKS}.get(role))
        if role == "B-stock-64":  # the first two of the 32-prompt calls the full run makes
            data = data[:64]
            tokens = sum(map(len, data))
        import torch
        from speculators.data_generation.vllm_hidden_states_generator import (
            VllmHiddenStatesGenerator,
        )

        generator = VllmHiddenStatesGenerator(model, layer_ids=LAYERS, max_model_len=2048)
        rpc_seconds = []
        phases: dict[str, float] = {}

        def timed(name, function):
            def run(*args, **kwargs):
                started = time.perf_counter()
                try:
                    return function(*args, **kwargs)
                finally:
                    key = args[0] if name == "rpc" and isinstance(args[0], str) else name
                    phases[key] = phases.get(key, 0.0) + time.perf_counter() - started
                    if key == "_get_captured_states":
                        rpc_seconds.append(time.perf_counter() - started)

            return run

        executor = generator.executor
        # every worker call goes through collective_rpc (execute_model and sample_tokens
        # too), timed once per method name; the scheduler runs in this process
        executor.collective_rpc = timed("rpc", executor.collective_rpc)
        generator.scheduler.schedule = timed("schedule", generator.scheduler.schedule)
        generator.generate(data[:8])
        for n in range(rounds):
            phases.clear()
            started = time.perf_counter()
            results = generator.generate(data)
            times.append(time.perf_counter() - started)
            rest = times[-1] - sum(phases.values())
            print(json.dumps({"phases": phases | {"driver_rest": rest}}), flush=True)
            if out and n == 0:
                import torch

                torch.save([r["hidden_states"] for r in results[:64]], out)
            del results
        gpu_peak = max(generator.executor.collective_rpc(peak_gpu))
        layout = generator.executor.collective_rpc(transport_layout)
        print(
            json.dumps(
                {
                    "rpc_get_seconds_total": sum(rpc_seconds),
                    "rpc_calls": len(rpc_seconds),
                    "transport_layout": layout,
                    "driver_threads": torch.get_num_threads(),
                }
            ),
            flush=True,
        )
        states = {r.name: r.state.value for r in spec_compat.status()}
        print(json.dumps({"patches": states}), flush=True)
    host_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        json.dumps(
            {
                "role": role,
                "tokens": tokens,
                "seconds": times,
                "tokens_per_s": [tokens / t for t in times],
                "gpu_peak_bytes": gpu_peak,
                "driver_peak_rss_bytes": host_peak,
            }
        ),
        flush=True,
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--role":
        measure(
            sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] if len(sys.argv) > 5 else None
        )
        return
    out_dir = Path(os.environ.get("OUT", "/tmp/out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    model = Path("/tmp/h200-model")
    started = time.perf_counter()
    build_model(model)
    print(f"model built in {time.perf_counter() - started:.1f} s", flush=True)
    summary: dict = {"runs": []}
    plan = [
        ("A", 3, None),
        ("A-stock-settings", 2, None),
        ("B-shm", 4, "/tmp/shm.pt"),
        ("B-stock", 1, "/tmp/stock.pt"),
        # bitwise reference for the first 64 prompts at a quarter of B-stock's time
        # (spec_compat cuts every call into 32-prompt calls: these are the same two)
        ("B-stock-64", 1, "/tmp/stock.pt"),
        ("B-shm-nochecks", 2, None),
        ("B-shm-t8", 3, None),  # B-shm with 8 host copy threads (4 layers: 4 busy)
        ("B-shm-t2", 3, None),  # B-shm with 2 host copy threads
    ]
    roles = os.environ.get("ROLES")
    plan = [p for p in plan if not roles or p[0] in roles.split(",")]
    for role, rounds, dump in plan:
        cmd = [sys.executable, __file__, "--role", role, str(model), str(rounds)]
        cmd += [dump] if dump else []
        env = os.environ | ROLE_ENV.get(role, {})
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            # logs of failed roles only: the device returns at most 8 files, h200.json first
            (out_dir / f"{role}.stderr.txt").write_text(proc.stderr[-4_000_000:])
            (out_dir / f"{role}.stdout.txt").write_text(proc.stdout[-4_000_000:])
            errors = [ln for ln in proc.stderr.splitlines() if "rror" in ln]
            print(f"{role} FAILED ({proc.returncode}):\n" + "\n".join(errors[-40:]), flush=True)
            summary["runs"].append({"role": role, "failed": proc.stderr[-3000:]})
            continue
        for line in lines:
            print(line, flush=True)
        record = json.loads(lines[-1])
        for line in lines[:-1]:
            item = json.loads(line)
            if "phases" in item:
                record.setdefault("phases", []).append(item["phases"])
            else:
                record |= item
        summary["runs"].append(record)
    by_role = {r["role"]: r for r in summary["runs"] if "tokens_per_s" in r}
    medians = {k: statistics.median(v["tokens_per_s"]) for k, v in by_role.items()}
    summary["median_tokens_per_s"] = medians
    if "A" in medians:
        summary["ratios_vs_A"] = {k: v / medians["A"] for k, v in medians.items()}
    if Path("/tmp/shm.pt").exists() and Path("/tmp/stock.pt").exists():
        import torch

        a, b = torch.load("/tmp/shm.pt"), torch.load("/tmp/stock.pt")
        summary["bitwise_equal_first_64_prompts"] = all(
            torch.equal(x, y)
            for pa, pb in zip(a, b, strict=True)
            for x, y in zip(pa, pb, strict=True)
        )
    print(json.dumps(summary, indent=2), flush=True)
    (out_dir / "h200.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
