"""The stock extractors' own silent data bugs, fixed by default and proven on real vLLM."""

from __future__ import annotations

import pytest

from . import tiny_models
from .conftest import LAYERS
from .harness import TOLERANCE, compare, oracle, outcome, run_stock

pytestmark = pytest.mark.e2e

LONG_MODEL_LEN = 1024


@pytest.fixture(scope="module")
def long_prompts() -> list[list[int]]:
    """32 prompts of 500-1,000 tokens: ~24k tokens, so steps exceed the 8,192-token budget."""
    return tiny_models.random_prompts(32, 500, 1000, seed=7)


@pytest.fixture(scope="module")
def long_oracle(tiny_llama, long_prompts):
    return oracle(tiny_llama, long_prompts, LAYERS)


def test_v030_chunked_prefill_is_exact_with_the_patch(
    line, speculators_dir, tiny_llama, long_prompts, long_oracle
):
    if not line.startswith("0.3"):
        pytest.skip("speculators 0.3.0 only; 0.4.x tracks per-request token counts")
    run = run_stock(speculators_dir, tiny_llama, long_prompts, LAYERS, max_model_len=LONG_MODEL_LEN)
    worst = compare(run.results[0], long_prompts, long_oracle)
    print(f"chunked-prefill mix: max relative error {worst:.2e}")
    assert worst <= TOLERANCE

    # Without the fix, the guard refuses instead of returning shifted states ...
    guarded = run_stock(
        speculators_dir,
        tiny_llama,
        long_prompts,
        LAYERS,
        max_model_len=LONG_MODEL_LEN,
        exclude=["v030_whole_prompt_prefill"],
    )
    assert guarded.returncode != 0
    assert "CaptureMisaligned" in guarded.log

    # ... and with neither, the stock 0.3.0 loop silently returns wrong hidden states.
    silent = run_stock(
        speculators_dir,
        tiny_llama,
        long_prompts,
        LAYERS,
        max_model_len=LONG_MODEL_LEN,
        exclude=["v030_whole_prompt_prefill", "v030_capture_guard"],
    )
    assert silent.returncode == 0, silent.tail
    assert outcome(silent, long_prompts, long_oracle) == "mismatch"


def test_results_in_input_order_and_more_than_32_prompts(line, speculators_dir, tiny_llama):
    prompts = tiny_models.random_prompts(33, 2, 64, seed=3)
    expected = oracle(tiny_llama, prompts, LAYERS)
    calls = [list(range(11)), list(range(12)), list(range(33))]
    run = run_stock(speculators_dir, tiny_llama, prompts, LAYERS, calls=calls)
    for results, call in zip(run.results, calls, strict=True):
        got = compare(results, [prompts[i] for i in call], [expected[i] for i in call])
        assert got <= TOLERANCE
    if line.startswith("0.4"):
        unpatched = run_stock(
            speculators_dir,
            tiny_llama,
            prompts,
            LAYERS,
            calls=[list(range(33))],
            exclude=["v04_batches_of_max_num_seqs"],
        )
        assert unpatched.returncode != 0
        assert "not found in captured states" in unpatched.log
