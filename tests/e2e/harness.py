"""Run the stock extractor in a subprocess and compare it with a transformers oracle."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spec_compat.engine.registry import ENV_PATCHES, UnsupportedDrift
from spec_compat.rehearse import rehearsal
from spec_compat.rehearse.child import oracle
from spec_compat.rehearse.rehearsal import relative_error

__all__ = ["oracle", "relative_error"]  # the tests' reference, shared with `rehearse`

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("run_extractor.py")
NATIVE_RUNNER = Path(__file__).with_name("run_native.py")
ERROR_LINE = re.compile(r"\b[A-Z]\w*(Error|Exception|Unsupported|Disagrees|Drift)\b: .*")


def last_error(text: str) -> str:
    """The last exception line of `text` (a worker's, without its log prefix)."""
    found = [m.group(0) for m in map(ERROR_LINE.search, text.splitlines()) if m]
    return found[-1] if found else "no exception in the log"


#: The oracle tolerance: max |vllm - transformers| / max |transformers|, per layer, float32.
TOLERANCE = 1e-5


def speculators_dirs() -> dict[str, Path]:
    """speculators line -> the `--target` folder holding it (see tools/make_env.py)."""
    configured = os.environ.get("SPEC_COMPAT_SPECULATORS_DIRS")
    dirs = (
        [Path(p) for p in configured.split(os.pathsep) if p]
        if configured
        else sorted((ROOT / ".venvs").glob("speculators-*"))
    )
    return {d.name.removeprefix("speculators-"): d for d in dirs if (d / "speculators").is_dir()}


@dataclass
class Run:
    returncode: int
    log: str
    data: dict[str, Any] | None
    calls: list[list[int]]

    @property
    def results(self) -> list[list[dict[str, Any]]]:
        assert self.data is not None, (
            f"extractor failed (exit {self.returncode}): {self.first_error}\n{self.tail}"
        )
        return self.data["results"]

    @property
    def error(self) -> str:
        """The last exception line of the log (a worker's, without its log prefix)."""
        return last_error(self.log)

    @property
    def worker_error(self) -> str | None:
        """The engine's report of its worker's error (the last exception line may be a later
        one: vLLM 0.20's CPU workers fail again while shutting down)."""
        worker = re.search(r"Worker failed with error '(.*?)'", self.log)
        return worker.group(1) if worker else None

    @property
    def first_error(self) -> str:
        """The engine's report of its worker's error, else the last exception line."""
        worker = self.worker_error
        return f"RuntimeError: Worker failed with error '{worker}'" if worker else self.error

    @property
    def tail(self) -> str:
        return "\n".join(self.log.splitlines()[-40:])


def run_stock(
    speculators_dir: Path,
    model: Path,
    prompts: list[list[int]],
    layers: list[int],
    *,
    calls: list[list[int]] | None = None,
    max_model_len: int = 512,
    apply: bool = True,
    only: list[str] | None = None,
    exclude: list[str] | None = None,
    strict: bool = True,
    env: dict[str, str] | None = None,
    launcher: list[str] | None = None,
    extra: dict[str, Any] | None = None,
    timeout: float = 600,
) -> Run:
    """Run the stock extractor in a fresh process; `launcher` prefixes the command (e.g.
    `spec-compat run`)."""
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.pt"
        calls = calls if calls is not None else [list(range(len(prompts)))]
        spec = {
            "model": str(model),
            "prompts": prompts,
            "layers": layers,
            "max_model_len": max_model_len,
            "calls": calls,
            "apply": apply,
            "only": only,
            "exclude": exclude,
            "strict": strict,
            "out": str(out),
        } | (extra or {})
        spec_file = Path(tmp) / "spec.json"
        spec_file.write_text(json.dumps(spec))
        proc = _run_child(
            [*(launcher or [sys.executable]), str(RUNNER), str(spec_file)],
            child_env(speculators_dir) | (env or {}),
            timeout,
        )
        data = (
            torch.load(out, weights_only=False) if proc.returncode == 0 and out.exists() else None
        )
        if data is not None and "results" in data:  # calls saved one by one (drop_results)
            data["results"] = [
                torch.load(r["file"]) if isinstance(r, dict) and "file" in r else r
                for r in data["results"]
            ]
        return Run(proc.returncode, proc.stdout, data, calls)


def patched_and_stock_with_a_small_kv_cache(
    speculators_dir: Path, model: Path, prompts: list[list[int]], layers: list[int], **kwargs: Any
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One call of `prompts` against 300 KV blocks, with spec_compat and again without
    `v04_batches_of_max_num_seqs`: (the patched results, the stock call's record)."""
    extra = kwargs.pop("extra", {}) | {"kv_blocks": 300, "catch_errors": True}
    runs = [
        run_stock(speculators_dir, model, prompts, layers, exclude=exclude, extra=extra, **kwargs)
        for exclude in (None, ["v04_batches_of_max_num_seqs"])
    ]
    for run in runs:
        assert run.returncode == 0, run.tail
    (patched,), (stock,) = (run.data["results"] for run in runs)
    return patched, stock


def doctor_report(speculators_dir: Path, *args: str) -> tuple[int, dict[str, Any]]:
    """`python -m spec_compat doctor --json ARGS` with one speculators line: (exit, report)."""
    env = {k: v for k, v in os.environ.items() if k != ENV_PATCHES}
    env["PYTHONPATH"] = str(speculators_dir)
    proc = subprocess.run(
        [sys.executable, "-m", "spec_compat", "doctor", "--json", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc.returncode, json.loads(proc.stdout)


def child_env(speculators_dir: Path | None = None) -> dict[str, str]:
    """spec_compat's own child environment (`rehearsal.child_env`), with the tests' KV cache
    fixed at 1 GB whatever the shell set, and vLLM 0.18-0.19's preload."""
    return rehearsal.child_env(speculators_dir) | {"VLLM_CPU_KVCACHE_SPACE": "1"} | preload_env()


def _run_child(command: list[str], env: dict[str, str], timeout: float):
    return subprocess.run(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )


def run_in_session(
    command: list[str],
    env: dict[str, str],
    log: Path,
    watch: Callable[[], bool] | None = None,
    timeout: float = 900,
) -> int:
    """`command` in a session of its own, its output in `log`; `watch`, polled every 10 ms,
    SIGKILLs the session when it turns true (the timeout does too).  The exit code; nothing
    left in the session outlives it (vLLM's workers share it)."""
    with log.open("w") as f:
        proc = subprocess.Popen(
            command, env=env, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                if watch is not None and watch():
                    break
                time.sleep(0.01)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    return code


def _native_run(model: Path, prompts: list[list[int]], layers: list[int], out: Path, **options):
    spec_file = out.with_suffix(".json")
    spec_file.write_text(
        json.dumps(
            {
                "model": str(model),
                "prompts": prompts,
                "layers": layers,
                "max_model_len": options.get("max_model_len", 512),
                "attention_backend": options.get("attention_backend"),
                "model_options": options.get("model_options") or {},
                "seeded_weights": options.get("seeded_weights", False),
                "out": str(out),
            }
        )
    )
    return _run_child([sys.executable, str(NATIVE_RUNNER), str(spec_file)], child_env(), 600)


def native_reference(
    model: Path,
    prompts: list[list[int]],
    layers: list[int],
    *,
    max_model_len: int = 512,
    attention_backend: str | None = None,
    model_options: dict | None = None,
    seeded_weights: bool = False,
) -> list[list[Any]]:
    """vLLM's own aux hidden states for `layers` (speculators' ids), per prompt (run_native.py)."""
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "native.pt"
        proc = _native_run(
            model,
            prompts,
            layers,
            out,
            max_model_len=max_model_len,
            attention_backend=attention_backend,
            model_options=model_options,
            seeded_weights=seeded_weights,
        )
        tail = "\n".join(proc.stdout.splitlines()[-40:])
        assert proc.returncode == 0, f"native reference failed:\n{tail}"
        return torch.load(out)


def fails_in_vllm_alike(run: Run, model: Path, prompts: list[list[int]], **options: Any) -> bool:
    """Whether vLLM's own engine on `model` (float32 as the run; neither spec_compat nor
    speculators) fails with the error that stopped `run`: the failure is vLLM's own."""
    core = run.worker_error or run.error.split(": ", 1)[-1]
    with tempfile.TemporaryDirectory() as tmp:
        proc = _native_run(model, prompts[:1], [0], Path(tmp) / "native.pt", **options)
    return proc.returncode != 0 and bool(core) and core in proc.stdout


TCMALLOC = Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")


#: test-only: Python's own start-up hook (sitecustomize) that lets vllm-cpu run Model
#: Runner V2 under Triton's interpreter, in the test's process and every worker it spawns
V2_RUNTIME = ROOT / "tests" / "v2_cpu_runtime"


def v2_env(speculators_dir: Path) -> dict[str, str]:
    """A child environment whose vLLM workers run Model Runner V2 (forced, as a user
    would with VLLM_USE_V2_MODEL_RUNNER=1) on vllm-cpu."""
    return {
        "PYTHONPATH": os.pathsep.join([str(V2_RUNTIME), str(speculators_dir)]),
        "VLLM_USE_V2_MODEL_RUNNER": "1",
        "TRITON_INTERPRET": "1",
    }


def v2_served() -> str | None:
    """Why the V2 route cannot run with this vLLM, or None where it can."""
    from spec_compat.patches import _model_runner as runners

    if importlib.util.find_spec("triton") is None:
        return "no triton in this environment"
    served, seen = runners.v2_rows_served()
    return None if served else f"model_runner_v2_rows does not serve this vLLM's V2: {seen}"


def preload_env() -> dict[str, str]:
    """vllm-cpu 0.18-0.19 refuse to start a worker unless LD_PRELOAD names tcmalloc and
    Intel OpenMP (vLLM's CPU install guide; later releases only warn).  Debian package
    libtcmalloc-minimal4; libiomp5 comes with the intel-openmp wheel."""
    from packaging.version import Version

    from spec_compat.engine.versions import vllm_version

    version = vllm_version()
    if version is None or not Version("0.18") <= Version(version.base_version) < Version("0.20"):
        return {}
    iomp = Path(sys.prefix) / "lib" / "libiomp5.so"
    return {"LD_PRELOAD": f"{TCMALLOC}:{iomp}"}


def compare(
    results: list[dict[str, Any]],
    prompts: list[list[int]],
    expected: list[list[Any]],
    tolerance: float = TOLERANCE,
) -> float:
    """Max relative error over prompts and layers, by spec_compat's own comparison
    (`rehearsal.worst_error`, what `rehearse` judges with); results that are not the
    prompts' (number, order, layers, shapes) fail as an AssertionError."""
    try:
        return rehearsal.worst_error(results, prompts, expected, tolerance=tolerance)[0]
    except rehearsal.Stop as stop:
        raise AssertionError(str(stop)) from None


def outcome(run: Run, prompts: list[list[int]], expected: list[list[Any]]) -> str:
    """'error' (the extractor raised), 'mismatch' (wrong data) or 'match' (oracle-exact)."""
    if run.data is None:
        return "error"
    try:
        for results, call in zip(run.results, run.calls, strict=True):
            got = compare(results, [prompts[i] for i in call], [expected[i] for i in call])
            if got > TOLERANCE:
                return "mismatch"
    except AssertionError:
        return "mismatch"
    return "match"


def refusal_reason(log: str) -> str | None:
    """spec_compat's refusal of the installed pair (`UnsupportedDrift`, raised before any
    model loads) in a failed run's log; None for anything else (a crash inside vLLM)."""
    marker = f"{UnsupportedDrift.__name__}:"
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if marker in line:
            return " ".join(x.strip() for x in lines[i : i + 4])
    return None


def kernel_refusal(log: str) -> str | None:
    """worker_kernel_check's refusal (a vLLM kernel that disagrees with its own reference)
    in a failed run's log, as one line; None for anything else."""
    marker = "disagrees with vLLM's own reference"
    line = next((x for x in log.splitlines() if marker in x), None)
    if line is None:
        return None
    return line[line.index("vLLM ") : line.index("nothing was stored")].strip()


def model_refusal(log: str) -> str | None:
    """capture_model_check's refusal before loading (`UnsupportedModel`), as one line."""
    marker = "UnsupportedModel: "
    line = next((x for x in log.splitlines() if marker in x), None)
    if line is None:
        return None
    text = line[line.index(marker) + len(marker) :].split(" (Refused before loading")[0]
    return text.split(": ", 1)[1] if text.startswith("/") else text  # not the model's path


def proven_at() -> dict[str, Any]:
    """The commit a result is proven at, and whether the code a cell proves
    (`compat_report.WATCHED`) had uncommitted changes then (tools/compat_report.py renders
    such a result stale); the tables it regenerates between releases (proofs.json) are not
    that code."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    return {
        "commit": git("rev-parse", "HEAD") or None,
        "uncommitted": bool(git("status", "--porcelain", "--", *_watched())),
    }


@functools.cache
def _watched() -> tuple[str, ...]:
    """What a matrix cell proves (`compat_report.WATCHED`), read once per process."""
    spec = importlib.util.spec_from_file_location("compat_report", ROOT / "tools/compat_report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    return tuple(report.WATCHED)
