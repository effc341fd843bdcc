"""A rehearsal's report, its verdict, and its child processes (`python -m
spec_compat.rehearse.child`), for `spec_compat.rehearse.command`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: float32 on both sides: what differs by more is not the same computation
TOLERANCE = 1e-4
#: a capture error (a row lost, shifted or taken from another prompt) is off by about the
#: states' own size; below this, vLLM's forward is told apart from the capture (rehearse)
CAPTURE_SCALE = 1e-2
#: how far vLLM's CPU kernels may round a batched run from the same prompts run alone
#: (Gemma 4, 1,500-token prompts on random weights: 1.8e-04 at the fourth layer)
BATCH_NOISE = 1e-3
PASS, UNTRUSTED, ENVIRONMENT = 0, 1, 2
#: vLLM's import and the route check take 15-25 s on 2 cores; a hung import is not waited out
PREFLIGHT_SECONDS = 600


class Stop(Exception):
    """A rehearsal that cannot go on: the exit code and what to tell the user."""

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Step:
    name: str
    seconds: float
    detail: str = ""
    ok: bool = True


@dataclass
class Rehearsal:
    model: str
    vllm: str | None = None
    speculators: str | None = None
    architecture: str | None = None
    reference: str | None = None
    layer_ids: dict[str, Any] = field(default_factory=dict)
    copy: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    max_relative_error: float | None = None
    tolerance: float = TOLERANCE
    patches_involved: list[str] = field(default_factory=list)
    error: str | None = None
    log_tail: list[str] = field(default_factory=list)  # the failed child's last lines
    exit_code: int = PASS
    seconds: float = 0.0

    def timed(self, name: str, work, *args, **kwargs):
        """`work`'s result; it returns `(result, what to say of the step)`."""
        started = time.perf_counter()
        try:
            result, detail = work(*args, **kwargs)
        except Stop as stop:
            self.steps.append(Step(name, time.perf_counter() - started, str(stop), ok=False))
            raise
        self.steps.append(Step(name, time.perf_counter() - started, detail))
        return result


def child_env(pythonpath: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """The environment of a child that runs vLLM: no inherited patch selection (the child
    applies its own), offline, a 1 GB KV cache on vLLM's CPU platform unless one is set;
    `pythonpath` replaces PYTHONPATH (e.g. the folder holding one speculators line)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEC_COMPAT_PATCHES")}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return env | {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}


@dataclass
class Child:
    """`child.py` in a fresh process, its output in a log file."""

    mode: str
    proc: subprocess.Popen
    log: Path
    spec_file: Path

    @classmethod
    def start(cls, mode: str, workdir: Path, architectures: list[str] | None = None) -> Child:
        """Started before its spec exists: it imports vLLM (and, given `architectures`,
        answers `preflight()`) while the rehearsal goes on; `run()` hands it the spec."""
        spec_file, log = workdir / f"{mode}.json", workdir / f"{mode}.log"
        command = [sys.executable, "-m", "spec_compat.rehearse.child", mode, str(spec_file)]
        if architectures is not None:
            asked = workdir / f"{mode}.preflight.json"
            asked.write_text(json.dumps({"architectures": architectures}))
            command.append(str(asked))
        with log.open("w") as sink:
            proc = subprocess.Popen(
                command, env=child_env(), stdin=subprocess.DEVNULL, stdout=sink, stderr=sink
            )
        return cls(mode, proc, log, spec_file)

    def preflight(self) -> dict[str, Any]:
        from spec_compat.rehearse.child import route_file

        answer = route_file(self.spec_file)
        deadline = time.monotonic() + PREFLIGHT_SECONDS
        while not answer.exists():
            if self.proc.poll() is not None:
                raise Stop(ENVIRONMENT, f"vLLM could not be started here: {self.last_error()}")
            if time.monotonic() > deadline:
                raise Stop(ENVIRONMENT, f"vLLM was not imported in {PREFLIGHT_SECONDS} s")
            time.sleep(0.05)
        return json.loads(answer.read_text())

    def run(self, spec: dict[str, Any]) -> None:
        from spec_compat.rehearse.child import write_atomically

        write_atomically(self.spec_file, spec | {"out": str(self.out)})

    @property
    def out(self) -> Path:
        return self.spec_file.with_suffix(".pt")

    def last_error(self) -> str:
        lines = [line for line in self.log.read_text().splitlines() if line.strip()]
        errors = [line for line in lines if "Error" in line or "error" in line.split(":")[0]]
        return (errors or lines or ["no output"])[-1].strip()

    def finish(self, report: Rehearsal) -> Any:
        """The child's result; a failure stops the rehearsal with its error."""
        import torch

        from spec_compat.api import REGISTRY

        if self.proc.wait() == 0:
            return torch.load(self.out, weights_only=False)
        tail = "\n".join(self.log.read_text().splitlines()[-60:])
        report.log_tail = tail.splitlines()[-25:]
        report.patches_involved = [name for name in REGISTRY.patches if name in tail]
        what = "the stock extractor" if self.mode == "extract" else "vLLM's own aux hidden states"
        raise Stop(UNTRUSTED, f"{what} failed: {self.last_error()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def relative_error(got: Any, want: Any) -> float:
    """max |got - want| / max |want|, on the CPU (the stock extractor may hand back CUDA
    tensors, the reference comes back on the CPU)."""
    got, want = got.float().cpu(), want.float().cpu()
    return float((got - want).abs().max() / want.abs().max())


def worst_error(
    results: list[dict[str, Any]],
    prompts: list[list[int]],
    expected,
    layers: list[int] | None = None,
    *,
    tolerance: float = TOLERANCE,
) -> tuple[float, str]:
    """The worst relative error over prompts and layers, and where it is (how many of that
    prompt's tokens differ by more than `tolerance`).  Raises `Stop` when the results are not
    the prompts' (their number, order, layer count or shapes); `layers` names the layers in
    messages (default: their positions)."""

    if len(results) != len(prompts):
        raise Stop(UNTRUSTED, f"{len(results)} results for {len(prompts)} prompts")
    worst, where = 0.0, ""
    for i, (result, ids, want) in enumerate(zip(results, prompts, expected, strict=True)):
        if result["input_ids"].tolist() != ids:
            raise Stop(UNTRUSTED, f"result {i} is not prompt {i}: results out of order")
        states = result["hidden_states"]
        if len(states) != len(want):
            raise Stop(UNTRUSTED, f"prompt {i}: {len(states)} layers, want {len(want)}")
        named = layers if layers is not None else range(len(want))
        for layer, got, ref in zip(named, states, want, strict=True):
            if tuple(got.shape) != tuple(ref.shape):
                raise Stop(UNTRUSTED, f"prompt {i}: shape {tuple(got.shape)}, want {ref.shape}")
            error = relative_error(got, ref)
            if error > worst:
                per_token = (got.float() - ref.float()).abs().amax(-1) / ref.float().abs().max()
                off = (per_token > tolerance).nonzero().flatten().tolist()
                worst, where = (
                    error,
                    (
                        f"prompt {i}, layer {layer}: {len(off)} of {len(ids)} tokens differ "
                        f"(first {off[:5]})"
                    ),
                )
    return worst, where


def compare(
    results: list[dict[str, Any]],
    prompts: list[list[int]],
    expected,
    layers: list[int],
    report: Rehearsal,
    tolerance: float = TOLERANCE,
) -> float:
    """The worst relative error; raises with where the states differ when it is too large."""
    worst, where = worst_error(results, prompts, expected, layers, tolerance=tolerance)
    report.max_relative_error = worst
    if worst > tolerance:
        raise Stop(
            UNTRUSTED,
            f"states differ from the reference: {worst:.1e} > {tolerance} at copy {where}.  "
            "Whole rows shifted or swapped mean a capture error; a few isolated tokens in a "
            "model with routed experts are usually near-tied router scores on which vLLM and "
            "transformers pick different experts (such models are compared with vLLM's own "
            "states instead)",
        )
    return worst
