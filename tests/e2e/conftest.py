from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import pytest

from . import tiny_models
from .harness import run_stock, speculators_dirs

LINES = sorted(speculators_dirs())
#: decoder layers captured in the tests: 0..3 of a 4-layer model, the last one included
LAYERS = [0, 2, 3]


def pytest_generate_tests(metafunc):
    if "line" in metafunc.fixturenames:
        metafunc.parametrize("line", LINES or ["none"], scope="session")


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
    return tiny_models.random_prompts(14, 2, 200)


@pytest.fixture(scope="session")
def short_oracle(tiny_llama, short_prompts):
    from .harness import oracle

    return oracle(tiny_llama, short_prompts, LAYERS)


@pytest.fixture(scope="session")
def patched_run(speculators_dir, tiny_llama, short_prompts):
    """The stock extractor with spec_compat.apply(): the batch in order, then reversed."""
    n = len(short_prompts)
    return run_stock(
        speculators_dir,
        tiny_llama,
        short_prompts,
        LAYERS,
        calls=[list(range(n)), list(reversed(range(n)))],
    )


#: Where the matrix run records one JSON file per (vLLM, speculators) oracle test;
#: tools/compat_report.py turns them into docs/compatibility.md and supported_versions.json.
RESULTS_DIR = os.environ.get("SPEC_COMPAT_RESULTS_DIR")
ORACLE_TEST = "test_patched_stock_extractor_matches_the_oracle"
FAMILY_TEST = "test_family_matches_the_oracle"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not RESULTS_DIR or getattr(item, "originalname", "") not in (ORACLE_TEST, FAMILY_TEST):
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        from spec_compat.gates import vllm_version

        line = item.callspec.params["line"]
        props = dict(item.user_properties)
        family = item.callspec.params.get("family", "llama")
        record = {
            "family": family,
            "vllm": str(vllm_version()).split("+")[0],
            "speculators": line,
            "outcome": report.outcome,
            "max_relative_error": props.get("max_relative_error"),
            "reference": props.get("reference", "transformers"),
            "patches_applied": props.get("patches_applied", []),
            "refusal": props.get("refusal"),
            "seconds": props.get("seconds"),
            "date": datetime.date.today().isoformat(),
            "detail": ""
            if report.passed
            else (report.longrepr[2] if report.skipped else str(report.longrepr)[-2000:]),
        }
        directory = Path(RESULTS_DIR)
        directory.mkdir(parents=True, exist_ok=True)
        name = f"{record['vllm']}__{line}" + ("" if family == "llama" else f"__{family}")
        (directory / f"{name}.json").write_text(json.dumps(record, indent=2))
