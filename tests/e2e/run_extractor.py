"""Drive the *stock* speculators extractor in a fresh process, as a user script would.

    python run_extractor.py SPEC.json

SPEC: {"model": dir, "prompts": [[ids]...], "layers": [..], "max_model_len": int,
       "calls": [[prompt indices]...], "apply": bool, "only": [...]|null,
       "exclude": [...]|null, "out": file.pt, "catch_errors": bool,
       "tensor_parallel_size": int, "drop_results": bool, "model_options": {...},
       "interrupt_call": n, "sample_interrupt_call": n, "sigint_in_reply_call": n,
       "kill_worker_call": n, "kv_blocks": n, "interrupt_points": k, "traced": [modules],
       "raise_there": bool}

With "interrupt_points", one call of every prompt is interrupted at k points chosen by count
and followed each time by a clean call (interrupt_points.py); that file's result is written.

With "models": [dir, or [dir, layers]] instead of "model", one generator per model is
built in turn in this one process (the architecture sweep), each serving every call; a
model whose generator or call fails is recorded as {"error": ...} and the next one runs.

With catch_errors, a generate() call that raises is recorded as {"error": "Type: message",
"shm_free_mb": /dev/shm's free MiB once it raised} and the next call runs on the same
generator.

Test-only override: the stock code passes dtype="auto", which vLLM's CPU platform runs in
bf16; the oracle needs float32, so the engine is forced to float32 in this process
(`spec_compat.rehearse.child.float32_engine`, which rehearsals use too), never by `apply()`.
Writes {"results": per call, "worker": worker report, "status": [...], "seconds": {...}}
with torch.save.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path


def build_generator(gen, spec: dict, model: str, timings: dict[str, float]):
    started = time.perf_counter()
    generator = gen.VllmHiddenStatesGenerator(
        model,
        layer_ids=spec["layers"],
        max_model_len=spec["max_model_len"],
        tensor_parallel_size=spec.get("tensor_parallel_size", 1),
    )
    timings["init"] = time.perf_counter() - started
    return generator


def run_calls(generator, spec: dict, timings: dict[str, float]) -> list:
    import torch

    prompts = spec["prompts"]
    outputs = []
    for n, indices in enumerate(spec["calls"]):
        started = time.perf_counter()
        restore = None
        if n == spec.get("fill_shm_call"):
            fill_shm(spec["fill_shm_leave_mb"])
        if n == spec.get("kill_worker_call"):
            kill_worker(generator, spec, timings)
        if n == spec.get("interrupt_call"):
            restore = interrupt_second_step(generator)
        elif n == spec.get("sample_interrupt_call"):
            restore = interrupt_before_sampling(generator)
        elif n == spec.get("sigint_in_reply_call"):
            restore = sigint_in_reply_wait(generator)
        try:
            results = generator.generate([prompts[i] for i in indices])
        except (Exception, KeyboardInterrupt) as exc:  # bad input, or the interrupted call:
            if not spec.get("catch_errors"):  # record the error, go on with the next
                raise
            outputs.append({"error": f"{type(exc).__name__}: {exc}", "shm_free_mb": shm_free_mb()})
            continue
        finally:
            if restore is not None:
                restore()
        timings[f"generate_{n}"] = time.perf_counter() - started
        kept = [{"input_ids": r["input_ids"], "hidden_states": r["hidden_states"]} for r in results]
        if spec.get("drop_results"):  # as a data-generation loop does: save, then let go
            torch.save(kept, f"{spec['out']}.call{n}")
            kept = {"file": f"{spec['out']}.call{n}"}
            del results
        outputs.append(kept)
        if spec.get("pause_after_first"):  # for interrupt tests: say so, then wait
            Path(spec["pause_after_first"]).write_text(str(os.getpid()))
            time.sleep(120)
        if spec.get("fail_after_first"):
            raise RuntimeError("failing on purpose after the first generate()")
    return outputs


def interrupt_second_step(generator):
    """Test-only: the call's second model step raises KeyboardInterrupt (Ctrl-C mid-call,
    caught by the caller) after the first step ran; returns what undoes it."""
    executor = generator.executor
    stock = executor.execute_model
    steps = [0]

    def execute_model(*args, **kwargs):
        steps[0] += 1
        if steps[0] == 2:
            raise KeyboardInterrupt("Ctrl-C in the second step of the call")
        return stock(*args, **kwargs)

    executor.execute_model = execute_model
    return lambda: vars(executor).pop("execute_model", None)


def interrupt_before_sampling(generator):
    """Test-only: Ctrl-C between a step's two phases: `execute_model` ran on the workers,
    the `sample_tokens` that finishes the step is never sent; returns what undoes it."""
    executor = generator.executor

    def sample_tokens(*args, **kwargs):
        vars(executor).pop("sample_tokens", None)  # once: Ctrl-C lands one time
        raise KeyboardInterrupt("Ctrl-C between execute_model and sample_tokens")

    executor.sample_tokens = sample_tokens
    return lambda: vars(executor).pop("sample_tokens", None)


def small_kv_cache(gen, blocks: int) -> None:
    """Test-only: a KV cache of `blocks` blocks, as a large model leaves on a GPU."""
    stock = gen.CacheConfig

    def cache_config(*args, **kwargs):
        config = stock(*args, **kwargs)
        config.num_gpu_blocks_override = blocks
        return config

    gen.CacheConfig = cache_config


def shm_free_mb() -> float:
    free = os.statvfs("/dev/shm")
    return free.f_bavail * free.f_frsize / 2**20


def fill_shm(leave_mb: int) -> None:
    """Test-only, in a private /dev/shm (`unshare -m`): fill it up to `leave_mb` MiB free."""
    free = os.statvfs("/dev/shm")
    fill = free.f_bavail * free.f_frsize - (leave_mb << 20)
    with open("/dev/shm/spec-compat-test-filler", "wb") as f:
        os.posix_fallocate(f.fileno(), 0, fill)


def engine_settings(config) -> dict:
    """The scheduler settings the generator's engine runs at (engine_batch_defaults)."""
    scheduler = config.scheduler_config
    names = ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill")
    return {name: getattr(scheduler, name, None) for name in names} | {
        "enforce_eager": config.model_config.enforce_eager
    }


def kill_worker(generator, spec: dict, timings: dict) -> None:
    """Test-only: SIGKILL the (first) worker process, as the OOM killer does, after taking
    the worker report; wait until vLLM's monitor has seen it die."""
    executor = generator.executor
    if spec.get("apply", True):
        from spec_compat.startup import worker_report

        timings["worker_report"] = executor.collective_rpc(worker_report)
    os.kill(executor.workers[0].proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while not executor.is_failed and time.monotonic() < deadline:
        time.sleep(0.1)


def sigint_in_reply_wait(generator):
    """Test-only: a real SIGINT reaches the driver alone (as Jupyter's interrupt sends it)
    while it waits for the workers' reply to the call's `_get_captured_states`, after the
    request went out; returns what undoes it."""
    # Ctrl-C as a terminal or Jupyter delivers it: a process started in the background
    # (`&`, as CI runs) inherits SIGINT ignored, and Python then installs no handler
    signal.signal(signal.SIGINT, signal.default_int_handler)
    executor = generator.executor
    stock_rpc = executor.collective_rpc

    def collective_rpc(method, *args, **kwargs):
        if method == "_get_captured_states":
            queue = executor.response_mqs[0]
            stock_dequeue = queue.dequeue

            def dequeue(*a, **kw):
                vars(queue).pop("dequeue", None)  # once
                os.kill(os.getpid(), signal.SIGINT)
                return stock_dequeue(*a, **kw)

            queue.dequeue = dequeue
        return stock_rpc(method, *args, **kwargs)

    executor.collective_rpc = collective_rpc
    return lambda: vars(executor).pop("collective_rpc", None)


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    timings: dict[str, float] = {}
    status: list[dict] = []
    if spec.get("apply", True):
        import spec_compat

        spec_compat.apply(
            only=spec.get("only"), exclude=spec.get("exclude"), strict=spec.get("strict", True)
        )

    import torch
    from speculators.data_generation import vllm_hidden_states_generator as gen

    from spec_compat.rehearse.child import float32_engine

    # test-only, in this process: float32 for the oracle; AMX MLA (picked when the CPU has
    # AMX) runs bf16 only, so MLA models are pinned to vLLM's float32-capable CPU_MLA
    float32_engine(gen, spec.get("model_options"), spec.get("attention_backend"))
    if spec.get("seeded_weights"):  # no checkpoint: weights from each tensor's name
        from spec_compat.rehearse import seeded_weights

        seeded_weights.use(gen)
    if spec.get("kv_blocks"):
        small_kv_cache(gen, spec["kv_blocks"])

    if "models" in spec:
        sweep = {}
        for model in spec["models"]:  # a dir, or [dir, layer ids] (None: stock selection)
            key = model
            if isinstance(model, list):
                model, layers = model
                key = f"{model}#{'auto' if layers is None else layers}"
            else:
                layers = spec["layers"]
            try:
                generator = build_generator(gen, spec | {"layers": layers}, model, {})
                sweep[key] = run_calls(generator, spec, {})
                generator.executor.shutdown()
            except Exception as exc:
                sweep[key] = {"error": f"{type(exc).__name__}: {exc}"[-2000:]}
            torch.save({"sweep": sweep}, spec["out"])  # what is done survives a crash
        return
    generator = build_generator(gen, spec, spec["model"], timings)
    if "interrupt_points" in spec:  # the many-points interrupt test (interrupt_points.py)
        import interrupt_points

        roots = interrupt_points.traced_roots(gen.__name__, spec.get("traced", []))
        found = interrupt_points.run(
            generator,
            spec["prompts"],
            spec["interrupt_points"],
            roots,
            raise_there=spec.get("raise_there", False),
        )
        torch.save(found, spec["out"])
        generator.executor.shutdown()
        return
    outputs = run_calls(generator, spec, timings)
    worker = None
    if spec.get("apply", True):  # a user script run through `spec-compat run` never imports it
        import spec_compat
        from spec_compat.startup import worker_report

        worker = timings.pop("worker_report", None)  # taken before a worker was killed
        if worker is None:
            worker = generator.executor.collective_rpc(worker_report)
        status = [r.as_dict() for r in spec_compat.status()]
    # per reply: rows the workers' value test failed (None: not tested there): the counts of
    # the patches._handoff.WorkerChecks the driver keeps as spec_compat.engine.names.WORKER_CHECKS,
    # spelled out: a launched script never imports spec_compat
    kept = getattr(generator.executor, "spec_compat_worker_checks", None)
    checks = None if kept is None else list(kept.counts)
    torch.save(
        {
            "results": outputs,
            "worker": worker,
            "status": status,
            "seconds": timings,
            "worker_checks": checks,
            # "set" where prompts are block-hashed (request_block_hashes_off turns it off)
            "block_hasher": None if getattr(generator, "block_hasher", None) is None else "set",
            "engine": engine_settings(generator.vllm_config),
        },
        spec["out"],
    )
    generator.executor.shutdown()


if __name__ == "__main__":
    main()
