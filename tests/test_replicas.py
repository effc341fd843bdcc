"""Chunks and the merge of a replicas run, on files written here."""

from __future__ import annotations

import ast
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from spec_compat.data.dataset import CONFIG, LENGTHS
from spec_compat.replicas.chunks import Chunk, grid, placeholder, repair, written
from spec_compat.replicas.merge import IncompleteRun, complete, merge


def sample(folder: Path, index: int, length: int = 3) -> Path:
    path = folder / f"data_{index}.pt"
    ids = torch.arange(index, index + length)
    states = [torch.full((length, 4), float(index))]
    torch.save({"input_ids": ids, "hidden_states": states, "loss_mask": torch.ones(length)}, path)
    return path


def finish(folder: Path, chunk: Chunk, lengths: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for index in chunk.indices():
        sample(folder, index, 2 + index % 3)
    if lengths:
        entries = {str(i): 2 + i % 3 for i in chunk.indices()}
        (folder / LENGTHS).write_text(json.dumps(entries, indent=2))
    config = {
        "model": {"hidden_size": 4},
        "data": {"num_samples": chunk.end},
        "hidden_states": {"layer_ids": [0]},
        "reproducibility": {"command": "chunk"},
    }
    (folder / CONFIG).write_text(json.dumps(config, indent=2))


def test_the_grid_lies_on_the_batch_grid_and_covers_every_sample():
    chunks = grid(100, 8, 2)
    assert chunks[0].start == 0 and chunks[-1].end == 100
    assert all(a.end == b.start for a, b in itertools.pairwise(chunks))
    assert all(c.start % 8 == 0 for c in chunks)
    assert 4 <= len(chunks) <= 7  # about three a replica
    assert grid(0, 8, 2) == []
    assert grid(5, 8, 4) == [Chunk(0, 5)]
    with pytest.raises(ValueError, match="positive"):
        grid(10, 0, 2)


def test_repair_gives_the_script_a_folder_its_resume_finishes(tmp_path):
    chunk, folder, quarantine = Chunk(16, 24), tmp_path / "chunk", tmp_path / "quarantine"
    assert repair(folder, chunk, quarantine) == 16
    assert placeholder(folder, chunk).exists()  # the script's resume starts at 16
    for index in (16, 17, 19):  # 18 never written: a writer thread was killed
        sample(folder, index)
    (folder / "data_20.pt").write_bytes(b"PK\x03\x04 cut")
    assert repair(folder, chunk, quarantine) == 18
    assert written(folder, chunk) == [16, 17]
    assert placeholder(folder, chunk).exists()  # not a sample of the chunk, nor a stray
    (attempt,) = quarantine.iterdir()  # one folder a repair, as check-data --repair makes
    assert sorted(p.name for p in attempt.iterdir()) == ["data_19.pt", "data_20.pt"]
    assert not complete(chunk, folder, tmp_path / "out")


def test_a_complete_folder_without_its_config_gives_up_its_last_sample(tmp_path):
    chunk, folder = Chunk(0, 4), tmp_path / "chunk"
    finish(folder, chunk)
    assert complete(chunk, folder, tmp_path / "out") and repair(folder, chunk, tmp_path / "q") == 4
    assert not (tmp_path / "q").exists()  # nothing to move, no quarantine made
    (folder / CONFIG).unlink()
    assert repair(folder, chunk, tmp_path / "q") == 3  # else the script finds nothing to do
    assert written(folder, chunk) == [0, 1, 2]


def test_the_merge_moves_the_samples_and_writes_the_single_runs_files(tmp_path):
    chunks = [Chunk(0, 4), Chunk(4, 8), Chunk(8, 10)]
    folders = [(c, tmp_path / "work" / c.name) for c in chunks]
    for chunk, folder in folders:
        finish(folder, chunk)
        placeholder_file = placeholder(folder, chunk)
        if placeholder_file is not None:
            placeholder_file.touch()
    (folders[1][1] / LENGTHS).write_text("{}")  # a resumed pre-#295 run: entries lost
    before = {i: (tmp_path / "work" / c.name / f"data_{i}.pt").read_bytes()
              for c, _ in folders for i in c.indices()}  # fmt: skip
    out = tmp_path / "out"
    assert merge(folders, out, "script.py --output-dir out") == 10
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([f"data_{i}.pt" for i in range(10)] + [CONFIG, LENGTHS])
    assert all((out / f"data_{i}.pt").read_bytes() == b for i, b in before.items())
    lengths = json.loads((out / LENGTHS).read_text())
    assert lengths == {str(i): 2 + i % 3 for i in range(10)}
    assert list(lengths) == [str(i) for i in range(10)]
    config = json.loads((out / CONFIG).read_text())
    assert config["data"]["num_samples"] == 10
    assert config["reproducibility"]["command"] == "script.py --output-dir out"
    assert not (out / CONFIG).read_text().endswith("\n")  # as the script writes it


def test_an_unfinished_chunk_stops_the_merge_and_a_cut_merge_finishes(tmp_path):
    chunks = [Chunk(0, 2), Chunk(2, 4)]
    folders = [(c, tmp_path / c.name) for c in chunks]
    finish(*folders[0][::-1])
    folders[1][1].mkdir()
    sample(folders[1][1], 2)
    out = tmp_path / "out"
    with pytest.raises(IncompleteRun, match=chunks[1].name):
        merge(folders, out, "cmd")
    assert not out.exists()
    finish(folders[1][1], chunks[1], lengths=False)
    (folders[1][1] / "data_3.pt").rename(out.parent / "elsewhere.pt")  # a merge cut short:
    out.mkdir()
    (out.parent / "elsewhere.pt").rename(out / "data_3.pt")  # one file moved already
    assert merge(folders, out, "cmd") == 4
    assert json.loads((out / LENGTHS).read_text()) == {"0": 2, "1": 3, "2": 4, "3": 2}


def test_the_scripts_own_options_are_read_as_argparse_reads_them():
    from spec_compat.replicas.run import command, option

    args = ["--output-dir", "a", "--batch-size=4", "--output-dir", "b"]
    assert option(args, "--output-dir") == "b"  # the last one wins
    assert option(args, "--batch-size") == "4"
    assert option(args, "--seed", "0") == "0"
    assert command("s.py", ["--x"], ["--only", "p"])[-5:] == ["run", "--only", "p", "s.py", "--x"]


def test_replicas_without_ray_say_how_to_install_it(tmp_path, capsys):
    import importlib.util

    from spec_compat.cli.run import main

    if importlib.util.find_spec("ray") is not None:
        pytest.skip("ray is installed here")
    assert main(["--replicas", "2", "script.py", "--output-dir", str(tmp_path)]) == 2
    assert "pip install 'spec-compat[ray]'" in capsys.readouterr().err


def test_a_script_that_never_calls_the_loader_is_refused_with_the_reason(tmp_path, monkeypatch):
    """The plan step ends without a plan: the script never called speculators'
    load_and_preprocess_dataset.  It ran in a scratch folder, never in --output-dir."""
    pytest.importorskip("ray")
    from spec_compat.cli.run import main

    script = tmp_path / "own_loader.py"
    script.write_text(
        "import argparse, pathlib\n"
        "p = argparse.ArgumentParser(); p.add_argument('--output-dir')\n"
        "pathlib.Path(p.parse_args().output_dir).mkdir(parents=True)\n"
    )
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match="load_and_preprocess_dataset") as stop:
        main(["--replicas", "2", str(script), "--output-dir", str(out)])
    assert "own_loader.py ended (exit 0) without calling it" in str(stop.value)
    assert not out.exists() and (tmp_path / "out.replicas" / "plan-output").is_dir()


def test_a_kept_plan_keeps_its_chunks_and_another_command_is_refused(tmp_path):
    from spec_compat.replicas.run import plan

    kept = {"script": "s.py", "args": ["--a"], "samples": 8, "call": {}, "chunks": [[0, 8]]}
    (tmp_path / "plan.json").write_text(json.dumps(kept))

    def never(samples: int) -> list[Chunk]:
        raise AssertionError("a kept plan is not planned again")

    assert plan("s.py", ["--a"], tmp_path, [], never)["chunks"] == [[0, 8]]
    with pytest.raises(SystemExit, match="belongs to another command"):
        plan("s.py", ["--b"], tmp_path, [], never)


def test_a_chunk_runs_in_a_session_of_its_own_and_takes_what_it_left_with_it(tmp_path, monkeypatch):
    """What the actor does: the driver's folder and environment (a value Ray set and the
    driver did not is dropped), its own session, and no process of it outlives it."""
    import sys
    import time

    from spec_compat.replicas.run import run_chunk

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # as Ray sets it in its workers
    child = (
        "import os, subprocess, sys\n"
        "sleeper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(sleeper.pid, os.getcwd(), os.environ.get('OMP_NUM_THREADS'),"
        " os.getsid(0) == os.getpid(), os.environ['ROLE'])\n"
    )
    log = tmp_path / "chunk.log"
    env = {"OMP_NUM_THREADS": None, "ROLE": "chunk"}
    assert run_chunk([sys.executable, "-c", child], env, str(log), str(tmp_path)) == 0
    pid, cwd, threads, leader, role = log.read_text().split()
    assert (cwd, threads, leader, role) == (str(tmp_path), "None", "True", "chunk")
    deadline = time.monotonic() + 10
    while _running(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(int(pid)), "the chunk's own child outlived it"


def _running(pid: int) -> bool:
    """Alive and not a zombie (a container's init may leave the killed one unreaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_one_bar_for_the_run_and_a_summary_line(capsys):
    from spec_compat.replicas.progress import Progress

    progress = Progress(total=32, done=8, replicas=2)  # 8 from an earlier run
    progress.update(20, alive=1)
    progress.note("spec_compat: chunk 000000016-000000032 done (attempt 2)")
    assert "chunk 000000016-000000032 done" in capsys.readouterr().err
    line = progress.close("/data/out", chunks=4, retried=1, earlier=1)
    assert line.startswith("spec_compat: 32 samples in /data/out: 24 written by this run in ")
    assert line.endswith("2 replicas, 4 chunks (1 retried, 1 done by an earlier run)")


#: A data script without speculators that keeps the replica_dataset_range patch's contract
#: itself (plan: the length, then exit; chunk: stop at the end), resumes like speculators'
#: and, once (a marker file), SIGKILLs itself before writing sample KILL.
FAKE_SCRIPT = """
import argparse, json, os, signal, sys
from pathlib import Path
import torch
p = argparse.ArgumentParser()
for name in ("--output-dir", "--batch-size", "--mark"):
    p.add_argument(name)
p.add_argument("--token-freq-path", default="token_freq.pt")  # relative: the driver's folder
args = p.parse_args()
role = json.loads(os.environ.get("SPEC_COMPAT_REPLICA") or "null")
if role and role["mode"] == "plan":
    Path(args.token_freq_path).write_text("counted once")
    call = {"token_freq_path": args.token_freq_path}
    Path(role["plan"]).write_text(json.dumps({"samples": 10, "argv": sys.argv, "call": call}))
    sys.exit(0)
assert Path(args.token_freq_path).read_text() == "counted once"
out, end = Path(args.output_dir), role["end"] if role else 10
out.mkdir(parents=True, exist_ok=True)
start = max((int(f.stem[5:]) for f in out.glob("data_*.pt")), default=-1) + 1
for i in range(start, end):
    if i == 8 and not os.path.exists(args.mark):
        Path(args.mark).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    n = 2 + i % 3
    sample = {"input_ids": torch.arange(1, n + 1), "hidden_states": [torch.full((n, 4), i + 1.0)],
              "loss_mask": torch.ones(n, dtype=torch.long)}
    torch.save(sample, out / f"data_{i}.pt")
config = {"model": {"hidden_size": 4}, "data": {"num_samples": end},
          "hidden_states": {"layer_ids": [0]}, "reproducibility": {"command": "x"}}
(out / "data_config.json").write_text(json.dumps(config, indent=2))
"""


@pytest.mark.e2e  # a local Ray cluster and a dozen processes: 25-80 s on 2 cores
@pytest.mark.one_release  # nothing in it depends on the vLLM release
def test_the_driver_on_ray_retries_a_killed_chunk_and_merges_one_set(tmp_path, monkeypatch, capsys):
    """run.py end to end on a local Ray cluster, without speculators or vLLM: plan, two
    replicas, a chunk whose script is SIGKILLed mid-way resumed, the merge."""
    pytest.importorskip("ray")
    from spec_compat.cli.run import main
    from spec_compat.data.dataset import check

    script = tmp_path / "fake_script.py"
    script.write_text(FAKE_SCRIPT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    out, mark = tmp_path / "out", tmp_path / "killed"
    args = [str(script), "--output-dir", str(out), "--batch-size", "2", "--mark", str(mark)]
    driver = ["--replicas", "2", "--chunks-per-replica", "1", "--ray-address", "local"]
    try:
        assert main([*driver, "--keep-parts", *args]) == 0
    finally:
        import ray

        ray.shutdown()
    assert mark.exists()  # chunk [6, 10) died at 8 once, then finished
    report = check(out, progress=False)
    assert report.ok and report.files == 10, report.problems
    config = json.loads((out / CONFIG).read_text())
    assert config["reproducibility"]["command"] == " ".join(["fake_script.py", *args[1:]])
    workspace = tmp_path / "out.replicas"
    assert json.loads((workspace / "plan.json").read_text())["chunks"] == [[0, 6], [6, 10]]
    captured = capsys.readouterr()
    assert "attempt 2 of 3 resumes it" in captured.err
    assert "10 samples in" in captured.out and "(1 retried)" in captured.out


@pytest.mark.parametrize("replica", [False, True])
def test_only_a_replicas_copy_selects_the_dataset_range_patch(tmp_path, replica):
    """Not a default patch (doctor and other runs never import speculators' preprocessing
    and its `datasets`); `spec-compat run` adds it in a copy the replicas driver started."""
    from spec_compat.engine.names import ENV_PATCHES, ENV_REPLICA, REPLICA_PATCH

    script = tmp_path / "script.py"
    script.write_text("import spec_compat\nprint([r.name for r in spec_compat.status()])\n")
    env = {k: v for k, v in os.environ.items() if k not in (ENV_PATCHES, ENV_REPLICA)}
    if replica:
        env[ENV_REPLICA] = json.dumps({"mode": "plan", "plan": str(tmp_path / "plan.json")})
    out = subprocess.run(
        [sys.executable, "-m", "spec_compat", "run", str(script)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    selected = ast.literal_eval(out.stdout.strip().splitlines()[-1])
    assert "scheduler_config_initvars" in selected
    assert (REPLICA_PATCH in selected) is replica
