"""The replicas driver.

1. Plan: the script runs once here, under ``spec-compat run``, until its dataset is
   tokenized (``replica_dataset_range`` ends it there): the token frequencies land where one
   run puts them, the datasets cache is warm, and the plan records the dataset's length and
   the chunks (kept, so a rerun with other ``--replicas`` finishes the same chunks).
2. Chunks on the script's batch grid (``chunks.grid``), in a workspace beside
   ``--output-dir`` (``OUT.replicas``), each folder repaired before every attempt.
3. Ray: one actor a replica, each reserving the script's ``--tensor-parallel-size`` GPUs
   (a CPU on a machine without GPUs), runs one chunk at a time as a child process: the
   unchanged script under ``spec-compat run``, with ``--output-dir`` and
   ``--token-freq-path`` appended (argparse keeps the last).  A chunk whose run fails or
   whose actor dies (process killed, node lost: Ray restarts the actor) goes back in the
   queue, resumed from what it wrote, up to ``--attempts`` times.
4. Merge (``merge.merge``) into ``--output-dir``; the workspace goes unless ``--keep-parts``.

Running the same command again finishes an interrupted run and redoes no finished chunk.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from spec_compat.data.dataset import CONFIG
from spec_compat.engine.names import ENV_REPLICA
from spec_compat.replicas.chunks import Chunk, grid, repair, written
from spec_compat.replicas.merge import complete, merge
from spec_compat.replicas.progress import Progress

INSTALL = "pip install 'spec-compat[ray]'"
#: how often the driver looks at the chunks' folders for the progress bar (seconds)
POLL = 2.0
#: the driver's values of these reach the scripts (None: unset there too): Ray sets
#: OMP_NUM_THREADS=1 in its workers, which a single run in the same shell would not have
INHERITED = ("OMP_NUM_THREADS",)
NEEDS_LOADER = (
    "spec_compat: --replicas needs a script that loads its data with speculators' "
    "load_and_preprocess_dataset (speculators.data_generation.preprocessing): the plan "
    "learns the dataset's length from that call and each replica gets its chunk through "
    "it.  {script} ended (exit 0) without calling it"
)


def option(args: list[str], name: str, default: str | None = None) -> str | None:
    """The value argparse gives the script's `name` (the last one wins)."""
    value = default
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def command(script: str, args: list[str], selection: Sequence[str] = ()) -> list[str]:
    """`selection`: the driver's own --only / --exclude, for every copy of the script."""
    return [sys.executable, "-m", "spec_compat", "run", *selection, script, *args]


def plan(
    script: str,
    args: list[str],
    workspace: Path,
    selection: list[str],
    chunking: Callable[[int], list[Chunk]],
) -> dict[str, Any]:
    """The dataset's length, the script's call and the chunks, from one run stopped before
    vLLM (or those of an interrupted run of the same command)."""
    path = workspace / "plan.json"
    if path.is_file():
        kept = json.loads(path.read_text())
        if kept["script"] == script and kept["args"] == args:
            return kept  # an interrupted run's plan: same command, same chunks
        raise SystemExit(
            f"spec_compat: {workspace} belongs to another command ({kept['args']}); "
            "remove it or use another --output-dir"
        )
    dataset = workspace / "dataset.json"
    role = json.dumps({"mode": "plan", "plan": str(dataset)})
    # a script that never calls the loader runs whole here: into a scratch folder, never OUT
    scratch = ["--output-dir", str(workspace / "plan-output")]
    launch = command(script, args + scratch, selection)
    proc = subprocess.run(launch, env=os.environ | {ENV_REPLICA: role})
    if proc.returncode != 0:
        raise SystemExit(f"spec_compat: the plan step failed (exit {proc.returncode})")
    if not dataset.is_file():
        raise SystemExit(NEEDS_LOADER.format(script=script))
    call = json.loads(dataset.read_text())
    chunks = [[c.start, c.end] for c in chunking(call["samples"])]
    found = {"script": script, "args": args, "samples": call["samples"], "call": call}
    path.write_text(json.dumps(found | {"chunks": chunks}, indent=2))
    return found | {"chunks": chunks}


def _die_with_parent() -> None:
    """In the script's process: SIGKILL when the actor that started it dies, so that a
    retried chunk never has two writers (Linux; vLLM's own workers follow the script)."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def run_chunk(argv: list[str], env: dict[str, str | None], log: str, cwd: str) -> int:
    """In the actor: the script in the driver's folder and a session of its own (whatever
    it leaves running, vLLM's workers, goes with it), its output appended to `log`."""
    environ = dict(os.environ)
    for key, value in env.items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv, env=environ, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            start_new_session=True, preexec_fn=_die_with_parent,
        )  # fmt: skip
        try:
            return proc.wait()
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)


def _actor_class(ray: Any, gpus: float, cpus: float) -> Any:
    @ray.remote(num_gpus=gpus, num_cpus=cpus, max_restarts=-1, max_task_retries=0)
    class Replica:
        def run(self, argv: list[str], env: dict[str, str | None], log: str, cwd: str) -> int:
            return run_chunk(argv, env, log, cwd)

    return Replica


def main(ns: argparse.Namespace, script: str, args: list[str]) -> int:
    """`ns`: the launcher's options (replicas, ray_address, attempts, keep_parts,
    chunks_per_replica, only, exclude)."""
    try:
        import ray
    except ImportError:
        print(f"spec_compat: --replicas runs on Ray: {INSTALL}", file=sys.stderr)
        return 2
    out = option(args, "--output-dir")
    if out is None:
        print("spec_compat: --replicas needs the script's --output-dir", file=sys.stderr)
        return 2
    output = Path(out).resolve()
    workspace = output.with_name(output.name + ".replicas")
    if (output / CONFIG).is_file() and not workspace.exists():
        print(f"spec_compat: {output} is complete (its {CONFIG} is there): nothing to do")
        return 0
    (workspace / "logs").mkdir(parents=True, exist_ok=True)
    selection = [
        *(["--only", ns.only] if getattr(ns, "only", None) else []),
        *(["--exclude", ns.exclude] if getattr(ns, "exclude", None) else []),
    ]
    batch = int(option(args, "--batch-size", "8"))
    per_replica = getattr(ns, "chunks_per_replica", 3)
    found = plan(
        script, args, workspace, selection, lambda n: grid(n, batch, ns.replicas, per_replica)
    )
    chunks = [Chunk(a, b) for a, b in found["chunks"]]
    folders = {c: workspace / "chunks" / c.name for c in chunks}
    freq = found["call"]["call"].get("token_freq_path", "./token_freq.pt")
    local_freq = workspace / Path(str(freq)).name  # counted once: each chunk skips it
    if Path(str(freq)).is_file() and not local_freq.exists():
        shutil.copyfile(str(freq), local_freq)

    ray.init(address=ns.ray_address)
    tensor_parallel = int(option(args, "--tensor-parallel-size", "1") or 1)
    gpus = tensor_parallel if ray.cluster_resources().get("GPU") else 0
    Replica = _actor_class(ray, gpus, 0 if gpus else 1)
    actors = [Replica.remote() for _ in range(ns.replicas)]
    attempts = dict.fromkeys(chunks, 0)
    earlier = {c for c in chunks if complete(c, folders[c], output)}
    queue = [c for c in chunks if c not in earlier]
    counts = {c: c.end - c.start if c in earlier else len(written(folders[c], c)) for c in chunks}
    progress = Progress(found["samples"], sum(counts.values()), ns.replicas)
    inherited = {key: os.environ.get(key) for key in INHERITED}
    running: dict[Any, tuple[int, Chunk]] = {}
    idle, lost = list(range(ns.replicas)), set()
    while queue or running:
        while queue and idle:
            chunk, replica = queue.pop(0), idle.pop()
            attempts[chunk] += 1
            repair(folders[chunk], chunk, workspace / "quarantine" / chunk.name)
            role = {"mode": "chunk", "end": chunk.end, "samples": found["samples"]}
            extra = ["--output-dir", str(folders[chunk]), "--token-freq-path", str(local_freq)]
            log = str(workspace / "logs" / f"{chunk.name}.log")
            env = inherited | {ENV_REPLICA: json.dumps(role)}
            argv = command(script, args + extra, selection)
            running[actors[replica].run.remote(argv, env, log, os.getcwd())] = (replica, chunk)
        ready, _ = ray.wait(list(running), num_returns=1, timeout=POLL)
        for _, chunk in running.values():
            counts[chunk] = len(written(folders[chunk], chunk))
        progress.update(sum(counts.values()), ns.replicas - len(lost))
        if not ready:
            continue
        replica, chunk = running.pop(ready[0])
        try:
            code: int | str = ray.get(ready[0])
            lost.discard(replica)
        except ray.exceptions.RayError as error:  # the actor died: Ray restarts it
            code = type(error).__name__
            lost.add(replica)
        idle.append(replica)
        if complete(chunk, folders[chunk], output):
            counts[chunk] = chunk.end - chunk.start
            progress.note(f"spec_compat: chunk {chunk.name} done (attempt {attempts[chunk]})")
            continue
        if attempts[chunk] >= ns.attempts:
            raise SystemExit(
                f"spec_compat: chunk {chunk.name} failed {attempts[chunk]} times "
                f"(last: {code}); see {workspace / 'logs'}"
            )
        progress.note(
            f"spec_compat: chunk {chunk.name} ended unfinished (exit {code}); attempt "
            f"{attempts[chunk] + 1} of {ns.attempts} resumes it"
        )
        queue.append(chunk)
    progress.update(sum(counts.values()), ns.replicas - len(lost))
    retried = sum(1 for c in chunks if attempts[c] > 1)
    total = merge([(c, folders[c]) for c in chunks], output, " ".join([Path(script).name, *args]))
    if not ns.keep_parts:
        shutil.rmtree(workspace)
    print(progress.close(str(output), len(chunks), retried, len(earlier)), flush=True)
    return 0 if total == found["samples"] else 1
