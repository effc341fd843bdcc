"""`spec-compat run --replicas 2` on speculators' data script in its upstream shape
(`datagen_upstream_script.py`: speculators' own `load_and_preprocess_dataset` on a chat
dataset, the tiny Llama with a chat template), on a local Ray cluster and vLLM's CPU
workers, against one plain `spec-compat run` of the same command (the reference):

- after each case below, the set is the plain run's: every data_N.pt's tensors equal
  (float32 engine), the same sample_lengths.json (0.4.x) and token_freq.pt,
  data_config.json the same but for its time and the command's two paths, and
  `check-data` passes;
- one replica's script SIGKILLed (with its process group) mid-chunk, half a file written:
  the chunk is repaired and resumed, and the set is the same;
- the driver SIGKILLed (its process group) once a chunk is done: nothing of it outlives it,
  and the same command again finishes the set, the same, redoing no finished chunk.

Every chunk restarts vLLM, so the runs use few, large chunks (`--chunks-per-replica`).
The kill hook lives in `kill_launcher.py` (the stand-in imports it): the replica whose
chunk holds sample KILL_AT dies once, as the writer thread saves it; the retry passes the
marker file that the first kill created.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from . import tiny_models
from .conftest import LAYERS
from .harness import child_env, run_in_session
from .test_data_resume import assert_bitwise_equal, check_data, load_set

MISSING = [m for m in ("ray", "datasets") if importlib.util.find_spec(m) is None]
pytestmark = [pytest.mark.e2e, pytest.mark.exhaustive]
if MISSING and os.environ.get("SPEC_COMPAT_REQUIRE_E2E") != "1":
    pytestmark.append(pytest.mark.skip(reason=f"{' and '.join(MISSING)} not installed"))

SCRIPT = Path(__file__).with_name("datagen_upstream_script.py")
#: 32 chat samples in batches of 4; the tokenizer cuts a sample at 128 tokens
SAMPLES, BATCH, SEQ_LENGTH = 32, 4, 128
#: with 2 replicas and 1 chunk each: [0, 16) and [16, 32); 22 is in the second batch of
#: the second chunk, so the retry resumes a chunk with files on disk
KILL_AT = 22
#: every process a run starts carries this variable: what is left of it is found by it
TAG = "SPEC_COMPAT_TEST_RUN"
#: a killed run's processes (Ray's, the scripts', vLLM's workers) must be gone within this
GRACE = 60.0


@pytest.fixture(scope="module", autouse=True)
def _stack():
    assert not MISSING, f"SPEC_COMPAT_REQUIRE_E2E=1 but {' and '.join(MISSING)} not installed"


@pytest.fixture(scope="module")
def chat_llama(tiny_llama, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("chat-llama")
    shutil.copytree(tiny_llama, directory, dirs_exist_ok=True)
    return tiny_models.add_chat_template(directory)


@pytest.fixture(scope="module")
def chat_data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("chat-data") / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in tiny_models.chat_samples(SAMPLES)))
    return path


@pytest.fixture(scope="module")
def inputs(line, chat_llama, chat_data, tmp_path_factory) -> tuple[Path, Path, Path]:
    """Model, data and the datasets cache, the same for every run of a line (data_config.json
    records all three)."""
    return chat_llama, chat_data, tmp_path_factory.mktemp(f"hf-cache-{line}")


def script_args(inputs: tuple[Path, Path, Path], root: Path) -> list[str]:
    """The script's arguments, writing into root/out and root/token_freq.pt."""
    model, data, cache = inputs
    return [
        "--target-model-path", str(model),
        "--train-data-path", str(data),
        "--hf-cache-dir", str(cache),
        "--output-dir", str(root / "out"),
        "--token-freq-path", str(root / "token_freq.pt"),
        "--seq-length", str(SEQ_LENGTH),
        "--batch-size", str(BATCH),
        "--tensor-parallel-size", "1",
        "--num-preprocessing-workers", "1",
        "--layer-ids", *map(str, LAYERS),
    ]  # fmt: skip


def launch(speculators_dir: Path, args: list[str], root: Path, driver=(), env=None, watch=None):
    """`spec-compat run [DRIVER...] SCRIPT ARGS` in a session of its own; `watch`: polled
    every 10 ms, SIGKILLs the session when true.  Waits until no process of the run is left
    (GRACE).  (exit code, the driver's log, what outlived it: killed, for the assertion)."""
    tag = uuid.uuid4().hex
    command = [sys.executable, "-m", "spec_compat", "run", *driver, str(SCRIPT), *args]
    env = child_env(speculators_dir) | (env or {})
    env |= {"VLLM_WORKER_MULTIPROC_METHOD": "spawn", "RAY_USAGE_STATS_ENABLED": "0", TAG: tag}
    log = root / f"run-{time.monotonic_ns()}.log"
    code = run_in_session(command, env, log, watch, timeout=1800)
    return code, log.read_text(), outlived(tag)


def outlived(tag: str) -> list[str]:
    """The run's processes still there after GRACE seconds (each then SIGKILLed by its id)."""
    deadline = time.monotonic() + GRACE
    while (left := _tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid, _ in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return [cmdline for _, cmdline in left]


def _tagged(tag: str) -> list[tuple[int, str]]:
    marker = f"{TAG}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdecimal() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                status = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if status != "Z":
                    cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                    found.append((int(entry.name), cmdline[:200]))
    return found


def replicas_driver(count: int, chunks_per_replica: int) -> list[str]:
    return [
        "--replicas", str(count), "--chunks-per-replica", str(chunks_per_replica),
        "--ray-address", "local", "--keep-parts",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def reference(line, speculators_dir, inputs, tmp_path_factory) -> dict:
    """One plain run of the script: what every replicas run must write."""
    root = tmp_path_factory.mktemp(f"replicas-reference-{line}")
    code, log, left = launch(speculators_dir, script_args(inputs, root), root)
    assert code == 0, log[-3000:]
    assert not left, left
    out = root / "out"
    lengths = out / "sample_lengths.json"
    return {
        "root": root,
        "set": load_set(out, SAMPLES),
        "bytes": [(out / f"data_{i}.pt").read_bytes() for i in range(SAMPLES)],
        "lengths": lengths.read_text() if lengths.exists() else None,
        "config": (out / "data_config.json").read_text(),
        "freq": (root / "token_freq.pt").read_bytes(),
    }


def assert_the_reference_set(speculators_dir: Path, root: Path, reference: dict) -> str:
    """root/out and root/token_freq.pt are the reference run's; a line for the report."""
    out = root / "out"
    names = {f"data_{i}.pt" for i in range(SAMPLES)} | {"data_config.json"}
    names |= {"sample_lengths.json"} if reference["lengths"] is not None else set()
    assert {p.name for p in out.iterdir()} == names  # nothing of the workspace inside
    assert_bitwise_equal(out, reference["set"])
    identical = sum(
        (out / f"data_{i}.pt").read_bytes() == b for i, b in enumerate(reference["bytes"])
    )
    if reference["lengths"] is not None:
        assert (out / "sample_lengths.json").read_text() == reference["lengths"]
    assert (root / "token_freq.pt").read_bytes() == reference["freq"]
    config = json.loads((out / "data_config.json").read_text())
    want = json.loads(reference["config"])
    for c in (config, want):
        c.pop("generated_at", None)
    command, wanted = (
        config["reproducibility"].pop("command"),
        want["reproducibility"].pop("command"),
    )
    assert config == want
    assert command == wanted.replace(str(reference["root"]), str(root))  # one run's command
    code, report = check_data(speculators_dir, out)
    assert code == 0, report
    return (
        f"{SAMPLES} samples equal to the plain run's (float32), {identical} of them "
        "byte-identical files; token_freq.pt and sample_lengths.json identical; check-data 0"
    )


def test_a_replica_killed_mid_chunk_is_resumed_and_the_set_is_the_same(
    line, speculators_dir, inputs, reference, tmp_path
):
    args = script_args(inputs, tmp_path)
    marker = tmp_path / "killed-once"
    kill = {"SPEC_COMPAT_TEST_KILL": f"save:{KILL_AT}", "SPEC_COMPAT_TEST_KILL_ONCE": str(marker)}
    code, log, left = launch(speculators_dir, args, tmp_path, replicas_driver(2, 1), env=kill)
    assert code == 0, log[-5000:]
    assert not left, left
    assert marker.exists(), "the kill never fired"
    summary = [x for x in log.splitlines() if f"{SAMPLES} samples in " in x]
    assert summary, log[-3000:]  # the driver's closing line
    workspace = tmp_path / "out.replicas"
    quarantined = sorted(p.name for p in (workspace / "quarantine").rglob("data_*.pt"))
    assert f"data_{KILL_AT}.pt" in quarantined, quarantined  # the half-written file
    chunk_log = (workspace / "logs" / f"{16:09d}-{32:09d}.log").read_text()
    # both attempts start at the script's own resume: the placeholder's 16, then after the
    # files the first attempt left
    starts = [int(n) for n in re.findall(r"Resuming: (\d+) files", chunk_log)]
    assert len(starts) == 2 and starts[0] == 16 and 16 <= starts[1] <= KILL_AT, starts
    assert "ended unfinished" in log and "attempt 2 of 3" in log, log[-3000:]
    same = assert_the_reference_set(speculators_dir, tmp_path, reference)
    print(f"\n[{line}] --replicas 2, a replica killed writing data_{KILL_AT}.pt: quarantined "
          f"{quarantined}; attempt 2 resumed at data_{starts[1]}.pt; {same}\n"
          f"  {summary[-1]}")  # fmt: skip


def test_an_interrupted_run_is_finished_by_the_same_command(
    line, speculators_dir, inputs, reference, tmp_path
):
    args = script_args(inputs, tmp_path)
    driver = replicas_driver(2, 2)  # 4 chunks of 8: two rounds of two
    chunks = tmp_path / "out.replicas" / "chunks"

    def a_chunk_is_done() -> bool:
        return chunks.is_dir() and any(chunks.glob("*/data_config.json"))

    code, log, left = launch(speculators_dir, args, tmp_path, driver, watch=a_chunk_is_done)
    assert code == -signal.SIGKILL, log[-5000:]
    assert not left, f"processes of the killed run outlived it by {GRACE} s: {left}"
    from spec_compat.replicas.chunks import Chunk
    from spec_compat.replicas.merge import complete

    finished = {}
    for folder in sorted(chunks.iterdir()):
        chunk = Chunk(*map(int, folder.name.split("-")))
        if complete(chunk, folder, tmp_path / "out"):
            finished[chunk] = {i: _identity(folder / f"data_{i}.pt") for i in chunk.indices()}
    assert finished and len(finished) < 4, sorted(p.name for p in chunks.iterdir())
    logs = {c: (tmp_path / "out.replicas" / "logs" / f"{c.name}.log").stat().st_size
            for c in finished}  # fmt: skip

    code, again, left = launch(speculators_dir, args, tmp_path, driver)
    assert code == 0, again[-5000:]
    assert not left, left
    assert f"{len(finished)} done by an earlier run" in again, again[-3000:]
    for chunk, files in finished.items():  # moved into OUT by the merge, never rewritten
        for i, identity in files.items():
            assert _identity(tmp_path / "out" / f"data_{i}.pt") == identity, f"data_{i}.pt redone"
        log_file = tmp_path / "out.replicas" / "logs" / f"{chunk.name}.log"
        assert log_file.stat().st_size == logs[chunk], f"{chunk.name} ran again"
    same = assert_the_reference_set(speculators_dir, tmp_path, reference)
    print(f"\n[{line}] driver killed once {[c.name for c in finished]} were done; the same "
          f"command again redid none of them; {same}")  # fmt: skip


def _identity(path: Path) -> tuple[int, int]:
    """Which file it is and when it was written: a redone sample is a new file."""
    stat = path.stat()
    return stat.st_ino, stat.st_mtime_ns
