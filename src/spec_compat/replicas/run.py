"""The replicas driver.

1. Plan: the script runs once here, under ``spec-compat run``, until its dataset is
   tokenized (``replica_dataset_range`` ends it there): the token frequencies land where one
   run puts them, the datasets cache is warm, and the plan records the dataset's length.
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
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..data_set import CONFIG
from ..names import ENV_REPLICA
from .chunks import Chunk, grid, repair
from .merge import complete, merge

INSTALL = "pip install 'spec-compat[ray]'"


def option(args: list[str], name: str, default: str | None = None) -> str | None:
    """The value argparse gives the script's `name` (the last one wins)."""
    value = default
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def command(script: str, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "spec_compat", "run", script, *args]


def plan(script: str, args: list[str], workspace: Path) -> dict[str, Any]:
    """The dataset's length and the script's call, from one run stopped before vLLM."""
    path = workspace / "plan.json"
    if path.is_file():
        kept = json.loads(path.read_text())
        if kept["script"] == script and kept["args"] == args:
            return kept  # an interrupted run's plan: same command, same chunks
        raise SystemExit(
            f"spec_compat: {workspace} belongs to another command ({kept['args']}); "
            "remove it or use another --output-dir"
        )
    role = json.dumps({"mode": "plan", "plan": str(workspace / "dataset.json")})
    proc = subprocess.run(command(script, args), env=os.environ | {ENV_REPLICA: role})
    if proc.returncode != 0 or not (workspace / "dataset.json").is_file():
        raise SystemExit(f"spec_compat: the plan step failed (exit {proc.returncode})")
    dataset = json.loads((workspace / "dataset.json").read_text())
    found = {"script": script, "args": args, "samples": dataset["samples"], "call": dataset}
    path.write_text(json.dumps(found, indent=2))
    return found


def _die_with_parent() -> None:
    """In the script's process: SIGKILL when the actor that started it dies, so that a
    retried chunk never has two writers (Linux; vLLM's own workers follow the script)."""
    import ctypes
    import signal

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _actor_class(ray: Any, gpus: float, cpus: float) -> Any:
    @ray.remote(num_gpus=gpus, num_cpus=cpus, max_restarts=-1, max_task_retries=0)
    class Replica:
        def run(self, argv: list[str], env: dict[str, str], log: str) -> int:
            with open(log, "ab") as out:
                return subprocess.run(
                    argv, env=os.environ | env, stdout=out, stderr=out, preexec_fn=_die_with_parent
                ).returncode

    return Replica


def main(ns: argparse.Namespace, script: str, args: list[str]) -> int:
    """`ns`: the launcher's options (replicas, ray_address, attempts, keep_parts)."""
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
    found = plan(script, args, workspace)
    batch = int(option(args, "--batch-size", "8"))
    chunks = grid(found["samples"], batch, ns.replicas)
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
    queue = [c for c in chunks if not complete(c, folders[c], output)]
    running: dict[Any, tuple[Any, Chunk]] = {}
    idle = list(actors)
    started = time.monotonic()
    while queue or running:
        while queue and idle:
            chunk, actor = queue.pop(0), idle.pop()
            attempts[chunk] += 1
            repair(folders[chunk], chunk, workspace / "quarantine" / chunk.name)
            role = {"mode": "chunk", "end": chunk.end, "samples": found["samples"]}
            extra = ["--output-dir", str(folders[chunk]), "--token-freq-path", str(local_freq)]
            log = str(workspace / "logs" / f"{chunk.name}.log")
            ref = actor.run.remote(
                command(script, args + extra), {ENV_REPLICA: json.dumps(role)}, log
            )
            running[ref] = (actor, chunk)
        ready, _ = ray.wait(list(running), num_returns=1)
        actor, chunk = running.pop(ready[0])
        try:
            code = ray.get(ready[0])
        except ray.exceptions.RayError as error:  # the actor died: Ray restarts it
            code = f"{type(error).__name__}"
        idle.append(actor)
        if complete(chunk, folders[chunk], output):
            finished = sum(c.end - c.start for c in chunks if complete(c, folders[c], output))
            print(
                f"spec_compat: {finished}/{found['samples']} samples "
                f"({finished / max(time.monotonic() - started, 1e-9):.1f}/s)",
                flush=True,
            )
            continue
        if attempts[chunk] >= ns.attempts:
            raise SystemExit(
                f"spec_compat: chunk {chunk.name} failed {attempts[chunk]} times "
                f"(last: {code}); see {workspace / 'logs'}"
            )
        queue.append(chunk)
    total = merge([(c, folders[c]) for c in chunks], output, " ".join([Path(script).name, *args]))
    if not ns.keep_parts:
        shutil.rmtree(workspace)
    print(
        f"spec_compat: {total} samples in {output} "
        f"({time.monotonic() - started:.0f} s, {ns.replicas} replicas)"
    )
    return 0
