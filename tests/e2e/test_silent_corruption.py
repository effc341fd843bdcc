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

    # ... and without the fix and its guards, the stock 0.3.0 loop silently returns wrong
    # hidden states (test_v030_guards_refuse_what_the_stock_loop_shifts: each guard alone)
    silent = run_stock(
        speculators_dir,
        tiny_llama,
        long_prompts,
        LAYERS,
        max_model_len=LONG_MODEL_LEN,
        exclude=["v030_whole_prompt_prefill", "v030_capture_guard", "generate_checks"],
    )
    assert silent.returncode == 0, silent.tail
    assert outcome(silent, long_prompts, long_oracle) == "mismatch"


@pytest.mark.exhaustive
def test_v030_guards_refuse_what_the_stock_loop_shifts(
    line, speculators_dir, tiny_llama, long_prompts
):
    if not line.startswith("0.3"):
        pytest.skip("speculators 0.3.0 only")
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

    # ... with neither, generate_checks still sees prompts whose rows are missing ...
    checked = run_stock(
        speculators_dir,
        tiny_llama,
        long_prompts,
        LAYERS,
        max_model_len=LONG_MODEL_LEN,
        exclude=["v030_whole_prompt_prefill", "v030_capture_guard"],
    )
    assert checked.returncode != 0
    assert "CorruptHiddenStates" in checked.log and "rows for" in checked.log


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


@pytest.mark.exhaustive
def test_batch_sizes_shared_prefixes_and_length_limits(line, speculators_dir, tiny_llama):
    """Batches of 1, 8 and 64 (two scheduler passes of 32 on 0.4.x, steps over the 8,192-token
    budget on 0.3.0), 24 prompts sharing a 300-token prefix, and prompts of exactly
    max_model_len - 1 and beyond it (the stock code keeps max_model_len - 1 tokens; logged)."""
    limit = 511  # max_model_len 512 - 1
    prefix = tiny_models.random_prompts(1, 300, 300, seed=21)[0]
    shared = [prefix + p for p in tiny_models.random_prompts(24, 1, 150, seed=6)]
    prompts = tiny_models.random_prompts(40, 2, 120, seed=5) + shared
    prompts += tiny_models.random_prompts(1, limit, limit, seed=8)
    prompts += tiny_models.random_prompts(1, limit + 189, limit + 189, seed=9)
    kept = [p[:limit] for p in prompts]
    expected = oracle(tiny_llama, kept, LAYERS)
    calls = [[0], list(range(8)), list(range(64)), [64, 65]]
    run = run_stock(speculators_dir, tiny_llama, prompts, LAYERS, calls=calls)
    for results, call in zip(run.results, calls, strict=True):
        got = compare(results, [kept[i] for i in call], [expected[i] for i in call])
        assert got <= TOLERANCE, f"batch {call[:3]}...: {got:.2e}"
    assert f"prompt 1 has {limit + 189} tokens; the stock extractor keeps the first {limit}" in (
        run.log
    )


@pytest.mark.exhaustive
def test_bad_input_is_refused_clearly_and_loses_nothing(
    speculators_dir, tiny_llama, short_prompts, short_oracle
):
    """No prompts, an empty prompt, an out-of-vocabulary id: a clear error naming the prompt,
    raised before any work, and the same generator still serves the next call exactly."""
    prompts = [*short_prompts[:3], [], [7, tiny_models.VOCAB + 7]]
    calls = [[], [0, 3], [4], [0, 1, 2]]
    run = run_stock(
        speculators_dir, tiny_llama, prompts, LAYERS, calls=calls, extra={"catch_errors": True}
    )
    outputs = run.data["results"] if run.data else []
    assert len(outputs) == 4, run.tail
    assert "ValueError" in outputs[0]["error"]
    assert "prompt 1 is empty" in outputs[1]["error"]
    assert f"token id {tiny_models.VOCAB + 7} is outside the vocabulary" in outputs[2]["error"]
    assert compare(outputs[3], short_prompts[:3], short_oracle[:3]) <= TOLERANCE


@pytest.mark.exhaustive
def test_layer_out_of_range_is_refused_before_the_engine_starts(speculators_dir, tiny_llama):
    run = run_stock(speculators_dir, tiny_llama, [[7, 8, 9]], [0, 4])
    assert run.returncode != 0
    assert "Layer index 4 out of bounds [0, 3]" in run.log
    assert "Loading weights" not in run.log and "WorkerProc" not in run.log


@pytest.mark.exhaustive
def test_nan_and_all_zero_states_are_refused(line, speculators_dir, tmp_path):
    """The stock extractor returns NaN / all-zero hidden states silently; with apply() the
    call raises CorruptHiddenStates naming prompt and layer."""
    import torch

    model = tiny_models.build_broken_llama(tmp_path / "broken-llama")
    zero, nan = tiny_models.ZERO_TOKEN, tiny_models.NAN_TOKEN
    prompts = [[9, 10, 11, 12], [zero] * 4, [nan, 9, 10]]
    patched = run_stock(speculators_dir, model, prompts, LAYERS, extra={"catch_errors": True})
    error = patched.data["results"][0]["error"] if patched.data else patched.tail
    assert error.startswith("CorruptHiddenStates"), error
    assert "prompt 1, layer 0: all-zero state at token(s) [0, 1, 2, 3]" in error
    assert "prompt 2, layer 0: NaN/Inf" in error
    assert "prompt 0" not in error

    silent = run_stock(speculators_dir, model, prompts, LAYERS, exclude=["generate_checks"])
    assert silent.returncode == 0, silent.tail
    results = silent.results[0]
    assert bool((results[1]["hidden_states"][0] == 0).all())
    assert bool(torch.isnan(results[2]["hidden_states"][0]).any())
