"""The H200 experiment: bare vLLM prefill (A), the stock extractor with spec_compat (B:
states in memory, or B-files: the data script's loop writing synced files), the stock path,
and vLLM's native extraction (N: files, synced, or read back into memory), same model and
prompts; then bitwise comparisons (B vs the stock path, B vs N).  `MODEL=mla`: the same on a
DeepSeek-V2-shaped model.

Runs on the device machine after the kit is unpacked (see run_h200.sh).  Prints one JSON
line per measurement and a summary; writes $OUT/h200.json.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def error_lines(stderr: str, count: int = 1) -> list[str]:
    """The last `count` error lines of a log, with no folder of the machine that ran it
    (a record is committed; the full log stays in failures.log on the device)."""
    errors = [ln for ln in stderr.splitlines() if "rror" in ln]
    return [re.sub(r"(?:/[^\s/'\"()]+)+/", "", ln).strip() for ln in errors[-count:]]


ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
#: MODEL=mla: a random DeepSeek-V2-shaped model (MLA attention, 12 dense layers) instead
#: of the 16-layer Llama; the same roles run on it (the MLA goal)
MLA = os.environ.get("MODEL") in ("mla", "moe")
#: MODEL=moe: DeepSeek-V3-shaped instead (MLA, one dense layer, then 32 sigmoid-routed
#: experts, 4 a token in 4 groups, and a shared expert); needs vLLM's _moe_C (run_h200.sh)
MOE = os.environ.get("MODEL") == "moe"
#: on the MLA models, layers vLLM's native extraction can return: it has no last layer there
LAYERS = [2, 6, 9, 10] if MLA else [2, 8, 13, 15]
TRANSPORT = ["shm_transport_driver", "shm_transport_worker"]
CHECKS = ["generate_checks"]  # B-shm-nochecks: what the NaN/zero/row checks cost
PIPELINE = ["executor_pipelined_steps"]  # B-nopipe: each step's calls waited for
#: B role -> the patches it runs without (the stock path: neither transport nor pipeline)
EXCLUDED = {
    "B-stock": TRANSPORT + PIPELINE,
    "B-stock-64": TRANSPORT + PIPELINE,
    "B-shm-nochecks": CHECKS,
    "B-nopipe": PIPELINE,
    # the stock engine settings (32 prompts, 8,192-token steps) instead of vLLM's
    "B-stock-settings": ["engine_batch_defaults"],
    # the stock eager engine instead of vLLM's compiled one with CUDA graphs
    "B-eager": ["engine_compiled"],
}
#: B-files: the 0.4.x data script's loop (calls of 8 prompts, 4 writer threads, one
#: torch.save per sample while the next call computes, then os.sync); B-files-256: one call
FILE_BATCH = {"B-files": 8, "B-files-256": 256}
#: B-seqs256: B-shm with speculators' own MAX_NUM_SEQS at 256 (one pass a call; safe since
#: calls are cut by free KV blocks too); B-tuned: and 16,384-token steps (vLLM's default here)
ENGINE = {"B-seqs256": (256, None), "B-tuned": (256, 16384)}
#: copy threads of the B-shm variants (default: 4, a layer each)
ROLE_ENV = {
    "B-shm-t8": {"SPEC_COMPAT_COPY_THREADS": "8"},
    "B-shm-t2": {"SPEC_COMPAT_COPY_THREADS": "2"},
    # N: only so that LLM.collective_rpc can carry the peak-memory probe (a callable)
    "N": {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"},
    "N-shm": {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"},
    "N-graph": {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"},
    "N-mat": {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"},
    "N-shm-mat": {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"},
    "N-graph-mat": {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"},
    "N-eager": {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"},
    # compiled roles: no compile cache shared between roles whose aux layers differ
    "N-compiled": {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1", "VLLM_DISABLE_COMPILE_CACHE": "1"},
    "B-compiled": {"VLLM_DISABLE_COMPILE_CACHE": "1"},
    "A-nographs": {"VLLM_DISABLE_COMPILE_CACHE": "1"},
}
#: B-compiled / N-compiled / A-nographs (the compile lever): torch.compile without CUDA
#: graphs, at vLLM's batch settings
NO_GRAPHS = {"cudagraph_mode": "NONE"}


def build_model(directory: Path) -> None:
    import torch
    from transformers import (
        AutoModelForCausalLM,
        DeepseekV2Config,
        DeepseekV3Config,
        LlamaConfig,
    )

    from e2e import tiny_models

    directory.mkdir(parents=True, exist_ok=True)
    tiny_models.build_tokenizer(directory)
    mla = {
        "num_hidden_layers": 12,
        "first_k_dense_replace": 12,  # every layer dense: MLA is what is measured
        "kv_lora_rank": 512,
        "q_lora_rank": None,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "num_key_value_heads": 16,
    }
    moe = {
        "first_k_dense_replace": 1,
        "n_routed_experts": 32,
        "n_shared_experts": 1,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 1024,
        "n_group": 4,
        "topk_group": 2,
        "topk_method": "noaux_tc",  # the released config's routing keys, which vLLM reads
        "scoring_func": "sigmoid",
    }
    kind = DeepseekV3Config if MOE else DeepseekV2Config if MLA else LlamaConfig
    config = kind(
        **(
            mla | moe
            if MOE
            else mla
            if MLA
            else {"num_hidden_layers": 16, "num_key_value_heads": 8}
        ),
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_attention_heads=16,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    model.save_pretrained(directory, safe_serialization=True)


def prompts(count: int = 256, low: int = 512, high: int = 2048) -> list[list[int]]:
    import random

    rng = random.Random(5)
    return [[rng.randrange(4, 32000) for _ in range(rng.randint(low, high))] for _ in range(count)]


def peak_gpu(worker=None) -> int:  # runs in the worker through collective_rpc
    import torch

    return int(torch.cuda.max_memory_allocated())


def transport_layout(worker=None):  # runs in the worker through collective_rpc
    from spec_compat.engine.names import WORKER_TRANSPORT

    transport = getattr(worker, WORKER_TRANSPORT, None)
    pool = getattr(transport, "pool", None)
    return {
        "layout": getattr(transport, "used", None),
        "segments_reused": getattr(pool, "reused", 0),
        "segments_held": len(getattr(pool, "handed", ())) + len(getattr(pool, "spare", ())),
    }


#: role -> (shared_storage_path root, engine settings) for vLLM's native extraction
NATIVE_ROLES = {
    "N": "/tmp",
    "N-shm": "/dev/shm",
    "N-graph": "/tmp",  # vLLM's defaults (compiled, CUDA graphs) instead of the extractor's
    # *-mat: also copy every loaded tensor into process memory (clone) inside the timing:
    # safetensors' load_file returns file-backed (mmap) tensors whose pages are read lazily
    "N-mat": "/tmp",
    "N-shm-mat": "/dev/shm",
    "N-graph-mat": "/tmp",
    # N-files: the files written and synced (os.sync) inside the timing, not read back
    "N-files": "/tmp",
    # N-files-graph: the same at vLLM's defaults (compiled, CUDA graphs), as users run it
    "N-files-graph": "/tmp",
    # N-eager: vLLM's batch defaults, eager: the settings B runs at (engine_batch_defaults)
    "N-eager": "/tmp",
    "N-compiled": "/tmp",
}


def rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return -1


def native(role: str, model: str, rounds: int) -> None:
    """Role N: vLLM 0.24's own `extract_hidden_states` speculative method with the example
    hidden-states connector (safetensors file per request), timed over generate() plus
    reading every file back into CPU tensors with `load_hidden_states`.  Same model,
    prompts and layers as B: native layer id k is the state entering layer k, so
    speculators' k is native k + 1."""
    import shutil
    import tempfile

    import torch
    from vllm import LLM, SamplingParams
    from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
        cleanup_hidden_states,
        load_hidden_states,
    )
    from vllm.inputs import TokensPrompt

    data = prompts()
    tokens = sum(map(len, data))
    storage = tempfile.mkdtemp(prefix="native-states-", dir=NATIVE_ROLES[role])
    materialize = role.endswith("-mat")
    settings = (
        {}
        if role.startswith("N-graph") or role == "N-files-graph"
        else {"enforce_eager": True}
        if role == "N-eager"
        else {"compilation_config": NO_GRAPHS}
        if role == "N-compiled"
        else {
            # the stock extractor's engine settings (as B and A-stock-settings)
            "enforce_eager": True,
            "max_num_seqs": 32,
            "max_num_batched_tokens": 8192,
            "enable_chunked_prefill": False,  # as benchmarks/throughput.py's CPU role N
        }
    )
    llm = LLM(
        model=model,
        max_model_len=2048,
        enable_prefix_caching=False,
        **settings,
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
    inputs = [TokensPrompt(prompt_token_ids=p) for p in data]
    params = SamplingParams(max_tokens=1, temperature=0.0)

    read_back = [True]  # N-files: read back the first pass's first 8 files for the parity check

    def run(batch):
        started = time.perf_counter()
        outputs = llm.generate(batch, params, use_tqdm=False)
        generated = time.perf_counter()
        paths = [o.kv_transfer_params["hidden_states_path"] for o in outputs]
        # with vLLM's defaults (asynchronous scheduling) the last request's file can appear
        # after generate() returned: a user of the files waits for them, inside the timing
        waited = time.perf_counter()
        while not all(os.path.exists(p) for p in paths):
            if time.perf_counter() - waited > 60:
                raise TimeoutError("native files still missing 60 s after generate()")
            time.sleep(0.001)
        if role.startswith("N-files"):
            os.sync()
            synced = time.perf_counter()
            files = sum(os.path.getsize(p) for p in paths)
            states = [load_hidden_states(path) for path in paths[:8]] if read_back[0] else []
            read_back[0] = False
            return (
                states,
                paths,
                {"generate": generated - started, "sync": synced - generated, "file_bytes": files},
            )
        states = [load_hidden_states(path) for path in paths]
        loaded = time.perf_counter()
        rss_loaded = rss()
        if materialize:
            states = [{k: v.clone() for k, v in d.items()} for d in states]
        done = time.perf_counter()
        return (
            states,
            paths,
            {
                "generate": generated - started,
                "load_hidden_states": loaded - generated,
                "materialize_clone": done - loaded,
                "rss_after_load": rss_loaded,
                "rss_after_materialize": rss(),
            },
        )

    print(json.dumps({"rss_after_engine_start": rss()}), flush=True)
    states, paths, _ = run(inputs[:8])  # warm-up
    read_back[0] = True
    for path in paths:
        cleanup_hidden_states(path)
    times, phases = [], []
    for n in range(rounds):
        started = time.perf_counter()
        states, paths, phase = run(inputs)
        times.append(time.perf_counter() - started)
        phases.append(phase)
        print(json.dumps({"phases": phases[-1]}), flush=True)
        if n == 0:
            order_ok = sum(
                torch.equal(s["token_ids"].to(torch.long), torch.tensor(p, dtype=torch.long))
                for s, p in zip(states, data[: len(states)], strict=True)
            )
            first = states[0]["hidden_states"]
            print(
                json.dumps(
                    {
                        "token_ids_match_prompts": f"{order_ok}/{len(states)}",
                        "hidden_states_shape_0": list(first.shape),
                        "hidden_states_dtype": str(first.dtype),
                        "file_bytes_total": sum(os.path.getsize(p) for p in paths),
                        "storage": os.path.basename(storage),
                    }
                ),
                flush=True,
            )
            torch.save(
                [
                    [s["hidden_states"][:, i].clone() for i in range(len(LAYERS))]
                    for s in states[:8]
                ],
                f"/tmp/native-{role}.pt",
            )
        del states
        for path in paths:
            cleanup_hidden_states(path)
    try:
        gpu_peak = max(llm.collective_rpc(peak_gpu))
    except Exception as error:
        gpu_peak = f"unavailable: {error!r}"[:300]
    shutil.rmtree(storage, ignore_errors=True)
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
                "storage_root": NATIVE_ROLES[role],
            }
        ),
        flush=True,
    )


def native_parity(extractor: str, native_file: str) -> dict:
    """B's states (first prompts) against N's: bitwise, max abs diff, allclose in bf16."""
    import torch

    ours, theirs = torch.load(extractor), torch.load(native_file)
    count = min(len(ours), len(theirs))
    worst_abs, worst_rel, equal, close, shapes = 0.0, 0.0, True, True, []
    per_layer = [0.0] * len(LAYERS)
    for a_prompt, b_prompt in zip(ours[:count], theirs[:count], strict=True):
        for i, (a, b) in enumerate(zip(a_prompt, b_prompt, strict=True)):
            if a.shape != b.shape:
                shapes.append([list(a.shape), list(b.shape)])
                equal = close = False
                continue
            a32, b32 = a.float(), b.float()
            diff = float((a32 - b32).abs().max())
            worst_abs = max(worst_abs, diff)
            per_layer[i] = max(per_layer[i], diff)
            worst_rel = max(worst_rel, diff / max(float(b32.abs().max()), 1e-12))
            equal = equal and torch.equal(a, b)
            close = close and torch.allclose(a32, b32, rtol=1.6e-2, atol=1e-2)
    return {
        "prompts_compared": count,
        "bitwise_equal": equal,
        "allclose_bf16_rtol1.6e-2_atol1e-2": close,
        "max_abs_diff": worst_abs,
        "max_abs_diff_per_layer": per_layer,
        "max_rel_diff_vs_max_abs": worst_rel,
        "shape_mismatches": shapes[:4],
        "dtypes": [str(ours[0][0].dtype), str(theirs[0][0].dtype)],
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
        extra = {"compilation_config": NO_GRAPHS} if role == "A-nographs" else extra
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

        spec_compat.apply(exclude=EXCLUDED.get(role))
        if role == "B-stock-64":  # the first two of the 32-prompt calls the full run makes
            data = data[:64]
            tokens = sum(map(len, data))
        import torch
        from speculators.data_generation import vllm_hidden_states_generator as gen

        if role == "B-compiled":  # the capture is set before the first (compiling) step
            from vllm.config import CompilationConfig, CUDAGraphMode

            model_config, vllm_config = gen.ModelConfig, gen.VllmConfig
            gen.ModelConfig = lambda *a, **k: model_config(*a, **(k | {"enforce_eager": False}))
            graphs_off = CompilationConfig(cudagraph_mode=CUDAGraphMode.NONE)
            gen.VllmConfig = lambda *a, **k: vllm_config(
                *a, **(k | {"compilation_config": graphs_off})
            )
        seqs, step_tokens = ENGINE.get(role, (gen.MAX_NUM_SEQS, None))
        gen.MAX_NUM_SEQS = seqs
        generator = gen.VllmHiddenStatesGenerator(
            model, layer_ids=LAYERS, max_model_len=2048, max_num_batched_tokens=step_tokens
        )
        compilation = generator.vllm_config.compilation_config
        mode = getattr(compilation, "mode", getattr(compilation, "level", None))
        resolved = {"mode": str(mode), "cudagraph_mode": str(compilation.cudagraph_mode)}
        print(json.dumps({"compilation": resolved}), flush=True)
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
        if role in FILE_BATCH:
            times = [to_files(generator, data, FILE_BATCH[role], phases) for _ in range(rounds)]
        for n in range(0 if role in FILE_BATCH else rounds):
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
        from spec_compat.startup import worker_report

        capture = [r.get("capture") for r in generator.executor.collective_rpc(worker_report)]
        print(
            json.dumps(
                {
                    "rpc_get_seconds_total": sum(rpc_seconds),
                    "rpc_calls": len(rpc_seconds),
                    "transport_layout": layout,
                    "capture": capture,  # where the worker took the states
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


def to_files(generator, data: list[list[int]], batch: int, phases: dict) -> float:
    """One pass of B-files: every sample in /tmp/b-files, synced; returns its seconds."""
    import shutil
    from concurrent.futures import ThreadPoolExecutor

    import torch

    folder = Path("/tmp/b-files")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    os.sync()
    phases.clear()
    started = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        saves = []
        for start in range(0, len(data), batch):
            for i, r in enumerate(generator.generate(data[start : start + batch]), start):
                sample = {
                    "input_ids": r["input_ids"],
                    "hidden_states": r["hidden_states"],
                    "loss_mask": torch.ones_like(r["input_ids"]),
                }
                saves.append(pool.submit(torch.save, sample, folder / f"data_{i}.pt"))
        generated = time.perf_counter()
        for save in saves:
            save.result()
    saved = time.perf_counter()
    os.sync()
    done = time.perf_counter()
    files = sum(p.stat().st_size for p in folder.iterdir())
    print(
        json.dumps(
            {
                "phases": phases
                | {
                    "until_last_generate": generated - started,
                    "saves_after_it": saved - generated,
                    "sync": done - saved,
                    "file_bytes": files,
                }
            }
        ),
        flush=True,
    )
    return done - started


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--role" and sys.argv[2] in NATIVE_ROLES:
        native(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--role":
        measure(
            sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] if len(sys.argv) > 5 else None
        )
        return
    out_dir = Path(os.environ.get("OUT", "/tmp/out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    model = Path("/tmp/h200-model")
    # a warm machine's later call (another MODEL) starts clean: no stale shards or dumps
    shutil.rmtree(model, ignore_errors=True)
    for dump in Path("/tmp").glob("*.pt"):
        dump.unlink()
    started = time.perf_counter()
    build_model(model)
    print(f"model built in {time.perf_counter() - started:.1f} s", flush=True)
    summary: dict = {"runs": []}
    plan = [
        ("A", 5, None),
        ("A-stock-settings", 2, None),
        ("B-shm", 5, "/tmp/shm.pt"),
        ("B-eager", 3, "/tmp/eager.pt"),
        ("B-stock", 1, "/tmp/stock.pt"),
        ("B-stock-settings", 3, "/tmp/stocksettings.pt"),
        ("N-eager", 2, None),
        ("N-files-graph", 2, None),
        ("B-compiled", 5, "/tmp/compiled.pt"),
        ("N-compiled", 2, None),
        ("A-nographs", 3, None),
        # bitwise reference for the first 64 prompts at a quarter of B-stock's time
        # (spec_compat cuts every call into 32-prompt calls: these are the same two)
        ("B-stock-64", 1, "/tmp/stock.pt"),
        ("B-nopipe", 2, None),  # B-shm without executor_pipelined_steps
        ("B-seqs256", 4, "/tmp/seqs.pt"),
        ("B-tuned", 4, None),
        ("B-files", 2, None),
        ("B-files-256", 2, None),
        ("N-files", 2, None),
        ("B-shm-nochecks", 2, None),
        ("B-shm-t8", 3, None),  # B-shm with 8 host copy threads (4 layers: 4 busy)
        ("B-shm-t2", 3, None),  # B-shm with 2 host copy threads
        ("N", 3, None),
        ("N-shm", 3, None),
        ("N-graph", 3, None),
        ("N-mat", 3, None),
        ("N-shm-mat", 3, None),
        ("N-graph-mat", 3, None),
    ]
    roles = os.environ.get("ROLES")
    if roles:  # in the order ROLES names them
        by_name = {p[0]: p for p in plan}
        plan = [by_name[r] for r in roles.split(",") if r in by_name]
    deadline = float(os.environ.get("DEADLINE_S", "1e9"))
    t0 = time.perf_counter()
    for role, rounds, dump in plan:
        if time.perf_counter() - t0 > deadline:
            print(f"{role} SKIPPED: past DEADLINE_S={deadline}", flush=True)
            summary["runs"].append({"role": role, "skipped": "deadline"})
            continue
        role_started = time.perf_counter()
        rounds = min(rounds, int(os.environ.get("ROUNDS", rounds)))  # a shorter call
        cmd = [sys.executable, __file__, "--role", role, str(model), str(rounds)]
        cmd += [dump] if dump else []
        env = os.environ | ROLE_ENV.get(role, {})
        try:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                env=env,
                timeout=float(os.environ.get("ROLE_TIMEOUT_S", "900")),
            )
        except subprocess.TimeoutExpired as expired:

            def text(b):
                return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")

            proc = subprocess.CompletedProcess(
                cmd, -9, text(expired.stdout), text(expired.stderr) + "\nROLE TIMEOUT"
            )
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            # logs of failed roles, all in one file: the device returns at most 8 files
            with open(out_dir / "failures.log", "a") as log:
                log.write(f"===== {role} rc={proc.returncode} stderr tail\n")
                log.write(proc.stderr[-400_000:])
                log.write(f"\n===== {role} stdout tail\n{proc.stdout[-100_000:]}\n")
            errors = [ln for ln in proc.stderr.splitlines() if "rror" in ln]
            print(f"{role} FAILED ({proc.returncode}):\n" + "\n".join(errors[-40:]), flush=True)
            summary["runs"].append({"role": role, "failed": " | ".join(error_lines(proc.stderr))})
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
        record["role_wall_s"] = time.perf_counter() - role_started
        summary["runs"].append(record)
        with open(out_dir / "roles_stderr.log", "a") as log:  # warnings, fallbacks
            log.write(f"===== {role} stderr tail\n{proc.stderr[-60_000:]}\n")
            keep = [
                ln
                for ln in proc.stdout.splitlines()
                if any(w in ln for w in ("WARNING", "runner", "Runner", "onnector"))
            ]
            log.write(f"===== {role} stdout (warnings, runner, connector)\n")
            log.write("\n".join(keep[-200:]) + "\n")
        try:
            compare(summary)
        except Exception as error:
            summary["compare_error"] = repr(error)
        (out_dir / "h200.json").write_text(json.dumps(summary, indent=2))  # as it goes
        print(f"{role} done in {record['role_wall_s']:.1f} s", flush=True)
    compare(summary)
    print(json.dumps(summary, indent=2), flush=True)
    (out_dir / "h200.json").write_text(json.dumps(summary, indent=2))


def compare(summary: dict) -> None:
    """Medians, ratios, the transports' bitwise check and B-vs-N parity, from what ran."""
    by_role = {r["role"]: r for r in summary["runs"] if "tokens_per_s" in r}
    medians = {k: statistics.median(v["tokens_per_s"]) for k, v in by_role.items()}
    summary["median_tokens_per_s"] = medians
    if "A" in medians:
        summary["ratios_vs_A"] = {k: v / medians["A"] for k, v in medians.items()}
    # this call's parts of the issue-34 summary line (summary_line.py joins two calls)
    kind = "MoE" if MOE else "MLA" if MLA else "dense"
    if "A" in medians and "B-shm" in medians:
        summary["summary_part"] = f"{kind} B/A={medians['B-shm'] / medians['A']:.3f}"
    native_files = [r for r in ("N-files-graph", "N-files") if r in medians]
    if "B-files" in medians and native_files:
        ratio = medians["B-files"] / medians[native_files[0]]
        summary["files_part"] = f"B(files)/N(files)={ratio:.3f}"
    if Path("/tmp/shm.pt").exists() and Path("/tmp/stock.pt").exists():
        import torch

        a, b = torch.load("/tmp/shm.pt"), torch.load("/tmp/stock.pt")
        summary["bitwise_equal_first_64_prompts"] = all(
            torch.equal(x, y)
            for pa, pb in zip(a, b, strict=True)
            for x, y in zip(pa, pb, strict=True)
        )
    for mine, theirs, key in (
        ("/tmp/seqs.pt", "/tmp/stock.pt", "B-seqs256_vs_stock_first_64_prompts"),
        ("/tmp/shm.pt", "/tmp/stocksettings.pt", "B-shm_vs_B-stock-settings_first_64_prompts"),
        ("/tmp/shm.pt", "/tmp/eager.pt", "B-shm_vs_B-eager_first_64_prompts"),
    ):
        if Path(mine).exists() and Path(theirs).exists():
            summary[key] = native_parity(mine, theirs)
    if Path("/tmp/compiled.pt").exists() and Path("/tmp/native-N-compiled.pt").exists():
        summary["parity_B-compiled_vs_N-compiled_first_8_prompts"] = native_parity(
            "/tmp/compiled.pt", "/tmp/native-N-compiled.pt"
        )
    if Path("/tmp/compiled.pt").exists() and Path("/tmp/shm.pt").exists():
        summary["B-compiled_vs_B-shm_first_64_prompts"] = native_parity(
            "/tmp/compiled.pt", "/tmp/shm.pt"
        )
    for role in NATIVE_ROLES:
        if Path(f"/tmp/native-{role}.pt").exists() and Path("/tmp/shm.pt").exists():
            try:
                summary[f"parity_B-shm_vs_{role}_first_8_prompts"] = native_parity(
                    "/tmp/shm.pt", f"/tmp/native-{role}.pt"
                )
            except Exception as error:
                summary[f"parity_B-shm_vs_{role}_first_8_prompts"] = repr(error)
    ref = "/tmp/native-N-mat.pt"
    for role in NATIVE_ROLES:
        if role != "N-mat" and Path(ref).exists() and Path(f"/tmp/native-{role}.pt").exists():
            try:
                summary[f"parity_N-mat_vs_{role}_first_8_prompts"] = native_parity(
                    ref, f"/tmp/native-{role}.pt"
                )
            except Exception as error:
                summary[f"parity_N-mat_vs_{role}_first_8_prompts"] = repr(error)


if __name__ == "__main__":
    main()
