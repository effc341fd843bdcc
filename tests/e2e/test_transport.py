"""The shared-memory transport: bitwise the stock path, and nothing left in /dev/shm."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from spec_compat.transport import PREFIX

from . import battery, tiny_models
from .conftest import LAYERS
from .harness import RUNNER, TOLERANCE, compare, run_stock

pytestmark = pytest.mark.e2e
TRANSPORT = ["shm_transport_driver", "shm_transport_worker"]
#: the stock path: its own transport, and each step's calls waited for one by one
STOCK_PATH = [*TRANSPORT, "executor_pipelined_steps"]


def segments() -> set[str]:
    return set(glob.glob(f"/dev/shm/{PREFIX}*"))


def owner(segment: str) -> int:
    """The pid of the worker that made a segment (`spec_compat_<pid>_<hex>`)."""
    return int(os.path.basename(segment).removeprefix(PREFIX).split("_")[0])


def parent(pid: int) -> int | None:
    """The parent of a live process; None once it has exited (a zombie counts as exited)."""
    try:
        state, ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[:2]
    except OSError:
        return None
    return None if state in "ZXx" else int(ppid)


def leaked(before: set[str], grace: float = 60.0) -> set[str]:
    """Segments made since `before` whose worker is gone but that are still there after
    `grace` seconds: a killed worker's are unlinked by its resource tracker once that
    notices, which on a loaded machine can take more than a moment.  Segments of live
    workers belong to extractors still running (the other speculators line runs beside
    this one under pytest-xdist) and are not leaks."""

    def orphans() -> set[str]:
        return {s for s in segments() - before if parent(owner(s)) is None}

    deadline = time.monotonic() + grace
    while (left := orphans()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


@pytest.mark.exhaustive
def test_transport_is_bitwise_the_stock_path(line, speculators_dir, tiny_llama):
    before = segments()
    prompts = tiny_models.random_prompts(48, 2, 500, seed=21)
    calls = [list(range(48)), list(reversed(range(48)))]
    if line.startswith("0.3"):  # one call larger than the arena's first size: it must grow
        prompts += tiny_models.random_prompts(80, 300, 500, seed=22)
        calls.append(list(range(len(prompts))))
    calls.append(list(range(0, 48, 3)))
    # results saved and dropped after each call, as a data-generation loop does: later
    # calls reuse their shared memory (0.4.x), which must change nothing that comes back
    fast = run_stock(
        speculators_dir, tiny_llama, prompts, LAYERS, calls=calls, extra={"drop_results": True}
    )
    stock = run_stock(speculators_dir, tiny_llama, prompts, LAYERS, calls=calls, exclude=STOCK_PATH)
    (worker,) = fast.data["worker"]
    assert worker["transport"] == ("per layer" if line.startswith("0.3") else "per request")
    assert stock.data["worker"] == [None] or not stock.data["worker"][0]["transport"]
    # cpu_worker_cores: vLLM >= 0.2x keeps a CPU back for a scheduler process unless told
    # not to (on this 2-CPU machine: 2 worker threads with the patch, 1 without)
    assert worker["reserved_cpus"] == "0"
    if not line.startswith("0.3"):  # the workers tested the values (generate_checks then skips)
        assert fast.data["worker_checks"] and set(fast.data["worker_checks"]) == {0}
        assert worker["segments_reused"] >= len(calls) - 1
    for got, want in zip(fast.results, stock.results, strict=True):
        for a, b in zip(got, want, strict=True):
            assert torch.equal(a["input_ids"], b["input_ids"])
            for x, y in zip(a["hidden_states"], b["hidden_states"], strict=True):
                assert x.dtype == y.dtype and x.shape == y.shape and x.is_contiguous()
                assert torch.equal(x, y)
                # each result owns exactly its bytes (as the stock clones do): saving one
                # must not save a whole shared segment
                assert x.untyped_storage().nbytes() == x.numel() * x.element_size()
    assert not leaked(before)


@pytest.mark.fault
def test_a_worker_error_in_a_pipelined_step_fails_the_call_and_the_next_is_exact(
    line, speculators_dir, tiny_llama, llama_oracle
):
    """A step that fails in the worker (an out-of-vocabulary id, with the driver's prompt
    check off) fails its call, however many replies were outstanding; the call after it
    is exact."""
    if line.startswith("0.3"):
        pytest.skip("executor_pipelined_steps serves the 0.4.x loop")
    good = tiny_models.random_prompts(40, 200, 450, seed=31)  # 32 a call: two steps or more
    bad = [p.copy() for p in good]
    bad[3][50] = tiny_models.VOCAB + 7  # in the first step: later calls go out before its reply
    run = run_stock(
        speculators_dir,
        tiny_llama,
        bad + good,
        LAYERS,
        calls=[list(range(40)), list(range(40, 80))],
        exclude=["generate_checks"],
        extra={"catch_errors": True},
    )
    assert run.data is not None, run.tail
    failed, after = run.data["results"]
    assert isinstance(failed, dict) and "index out of range" in failed["error"], failed
    states = {r["name"]: r["state"] for r in run.data["status"]}
    assert states["executor_pipelined_steps"] == "applied"
    assert compare(after, good, llama_oracle(good)) <= TOLERANCE


@pytest.mark.fault
@pytest.mark.exhaustive
def test_no_segment_leaks_after_a_failed_call(speculators_dir, tiny_llama, short_prompts):
    before = segments()
    run = run_stock(
        speculators_dir, tiny_llama, short_prompts, LAYERS, extra={"fail_after_first": True}
    )
    assert run.returncode != 0 and "failing on purpose" in run.log
    assert not leaked(before)


@pytest.mark.fault
@pytest.mark.exhaustive
@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_a_stopped_driver_leaves_no_segment_and_no_process(
    speculators_dir, tiny_llama, short_prompts, tmp_path, stop
):
    """The driver stopped while it holds a call's results: Ctrl-C, `kill` (SIGTERM, which
    Python obeys without running any clean-up) and the OOM killer (SIGKILL).  Every worker
    and helper process it started goes, and every segment with them."""
    import psutil

    before = segments()
    marker = tmp_path / "paused"
    spec = {
        "model": str(tiny_llama),
        "prompts": short_prompts,
        "layers": LAYERS,
        "max_model_len": 512,
        "calls": [list(range(len(short_prompts)))],
        "out": str(tmp_path / "out.pt"),
        "pause_after_first": str(marker),
    }
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    env = os.environ | {"PYTHONPATH": str(speculators_dir), "VLLM_CPU_KVCACHE_SPACE": "1"}
    log = tmp_path / "log.txt"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, str(RUNNER), str(spec_file)],
            env=env,
            stdout=sink,
            stderr=sink,
            # Ctrl-C as a terminal delivers it: a test run started in the background (`&`)
            # ignores SIGINT, and the child would inherit that
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        deadline = time.monotonic() + 300
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert marker.exists(), "the extractor never reached its first result"
        assert any(parent(owner(s)) == proc.pid for s in segments() - before), (
            "no segment of this extractor's worker while it is alive"
        )
        started = psutil.Process(proc.pid).children(recursive=True)
        assert started, "no worker process"
        proc.send_signal(getattr(signal, stop))
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running 90 s after {stop}:\n" + log.read_text()[-3000:])
    finally:
        if proc.poll() is None:
            proc.kill()
    _, alive = psutil.wait_procs(started, timeout=60)
    assert not alive, f"left running after {stop}: {[p.cmdline()[:3] for p in alive]}"
    assert not leaked(before)


@pytest.mark.fault
@pytest.mark.exhaustive
def test_two_extractors_at_once_are_each_exact_and_leave_nothing(
    speculators_dir, tiny_llama, llama_oracle
):
    """Two data jobs on one machine: each extractor's segments are its own (named by its
    worker's pid), so neither reads the other's states, and both clean up."""
    from concurrent.futures import ThreadPoolExecutor

    before = segments()
    prompts = battery.short_prompts()
    halves = [prompts[::2], prompts[1::2]]

    def extract(part):  # three calls each, so that the two overlap while they compute
        return run_stock(
            speculators_dir, tiny_llama, part, LAYERS, calls=[list(range(len(part)))] * 3
        )

    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(extract, halves))
    for run, part in zip(runs, halves, strict=True):
        for result in run.results:
            assert compare(result, part, llama_oracle(part)) <= TOLERANCE
    assert not leaked(before)


@pytest.mark.exhaustive
def test_tensor_parallel_2_captures_on_rank_0_and_matches_the_oracle(
    line, speculators_dir, tiny_llama, short_prompts, short_oracle
):
    """Two CPU workers: only TP rank 0 captures and ships its rows through shared memory;
    the results still match the transformers oracle, and no segment is left behind."""
    from .harness import outcome

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("tensor parallel size 2 needs two CPUs")
    # vLLM's CPU workers bind threads per NUMA node, and a small machine has one: bind one
    # CPU to each rank by hand, and keep none back for a scheduler process (there is none)
    env = {"VLLM_CPU_OMP_THREADS_BIND": f"{cpus[0]}|{cpus[1]}", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    before = segments()
    run = run_stock(
        speculators_dir,
        tiny_llama,
        short_prompts,
        LAYERS,
        calls=[list(range(len(short_prompts)))] * 2,
        extra={"tensor_parallel_size": 2},
        env=env,
    )
    assert run.returncode == 0, run.tail
    assert outcome(run, short_prompts, short_oracle) == "match"
    rank0, rank1 = run.data["worker"]
    assert rank0["transport"] == ("per layer" if line.startswith("0.3") else "per request")
    assert rank1["transport"] is None
    assert not leaked(before)


def private_shm(size_mb: int) -> list[str]:
    """A launcher: the extractor in its own mount namespace with a `size_mb` /dev/shm."""
    mount = f'mount -t tmpfs -o size={size_mb}m tmpfs /dev/shm && exec "$0" "$@"'
    return ["unshare", "-m", "sh", "-c", mount, sys.executable]


@pytest.mark.exhaustive
@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="a private /dev/shm needs root"
)
@pytest.mark.fault
def test_a_full_dev_shm_raises_memory_error_and_the_next_call_is_exact(
    line, speculators_dir, tiny_llama, llama_oracle
):
    """/dev/shm filled to 12 MiB free before a call whose states need ~48 MiB (vLLM's own
    queues need 240 MiB of the 300): 0.4.x's call raises ShmFull, a MemoryError with the
    sizes and the fix (vLLM's RuntimeError before), and by the time it reaches the caller
    the 12 MiB the call took are free again (held until the next call before); 0.3.0's
    arena falls back to the stock RPC and serves it exactly.  Either way the same
    generator's next call is exact."""
    big, small = battery.long_prompts(), battery.short_prompts()[:3]
    run = run_stock(
        speculators_dir,
        tiny_llama,
        big + small,
        LAYERS,
        calls=[list(range(len(big))), list(range(len(big), len(big) + len(small)))],
        max_model_len=battery.MAX_MODEL_LEN,
        launcher=private_shm(300),
        extra={"catch_errors": True, "fill_shm_call": 0, "fill_shm_leave_mb": 12},
    )
    assert run.data is not None, run.tail
    full, after = run.data["results"]
    if line.startswith("0.3"):
        assert compare(full, big, llama_oracle(big)) <= TOLERANCE
    else:
        error = full["error"]
        assert error.startswith("ShmFull: spec_compat: /dev/shm is full: "), error
        assert "MiB are free" in error and "--shm-size" in error
        assert full["shm_free_mb"] >= 11, f"the failed call still holds /dev/shm: {full}"
    assert compare(after, small, llama_oracle(small)) <= TOLERANCE
