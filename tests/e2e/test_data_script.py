"""speculators' data step as users run it: a script in the shape of the upstream
`scripts/data_generation_offline.py` (`datagen_script.py`: speculators imported at module
level), unchanged, through `spec-compat run`, on vLLM's spawned CPU workers.

Spawn re-imports the script in each worker before vLLM loads anything; only the start-up
hook has the patches in place by then (`SPEC_COMPAT_STARTUP=0` shows the run without it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from . import tiny_models
from .battery import KEPT_TOKENS, MAX_MODEL_LEN
from .conftest import LAYERS, LINES
from .harness import TOLERANCE, _run_child, child_env, relative_error

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).with_name("datagen_script.py")
FLOAT32 = Path(__file__).with_name("float32_launcher.py")
#: a real run's dtype: vLLM runs dtype="auto" in bf16 (also for this float32 checkpoint)
BF16_TOLERANCE = 5e-2
#: 10 samples in batches of 4 (three generate() calls), one longer than the model allows
PROMPTS = tiny_models.random_prompts(9, 2, 160, seed=21) + tiny_models.random_prompts(
    1, KEPT_TOKENS + 40, KEPT_TOKENS + 40, seed=22
)


def loss_mask(ids: list[int]) -> list[int]:
    """Like a chat sample's: the first third (the user turn) masked out."""
    return [0] * (len(ids) // 3) + [1] * (len(ids) - len(ids) // 3)


def run_script(
    speculators_dir: Path, model: Path, root: Path, *args: str, env=None, float32: bool = True
):
    """`spec-compat run datagen_script.py ...`; `float32`: through float32_launcher.py."""
    data = root / "samples.jsonl"
    data.write_text(
        "".join(json.dumps({"input_ids": p, "loss_mask": loss_mask(p)}) + "\n" for p in PROMPTS)
    )
    launcher = [str(FLOAT32)] if float32 else ["-m", "spec_compat", "run"]
    command = [
        sys.executable, *launcher,
        str(SCRIPT),
        "--target-model-path", str(model),
        "--train-data-path", str(data),
        "--output-dir", str(root / "out"),
        "--max-model-len", str(MAX_MODEL_LEN),
        "--batch-size", "4",
        "--layer-ids", *map(str, LAYERS),
        *args,
    ]  # fmt: skip
    spawn = {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}  # vLLM's CPU default, said outright
    return _run_child(command, child_env(speculators_dir) | spawn | (env or {}), timeout=900)


@pytest.fixture(scope="module")
def script_run(line, speculators_dir, tiny_llama, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"datagen-{line}")
    proc = run_script(speculators_dir, tiny_llama, root, "--tensor-parallel-size", "1")
    return proc, root / "out"


def worst_error(proc, out: Path, expected: list[list]) -> float:
    """Checks every saved sample against its prompt; the max relative error of its states."""
    import torch

    tail = "\n".join(proc.stdout.splitlines()[-40:])
    assert proc.returncode == 0, tail
    assert sorted(p.name for p in out.glob("data_*.pt")) == sorted(
        f"data_{i}.pt" for i in range(len(PROMPTS))
    )
    worst = 0.0
    for i, (prompt, want) in enumerate(zip(PROMPTS, expected, strict=True)):
        sample = torch.load(out / f"data_{i}.pt")
        kept = prompt[:KEPT_TOKENS]
        assert sample["input_ids"].tolist() == kept, f"data_{i}.pt holds another sample"
        assert sample["loss_mask"].tolist() == loss_mask(prompt)[: len(kept)]
        assert len(sample["hidden_states"]) == len(LAYERS)
        for got, ref in zip(sample["hidden_states"], want, strict=True):
            assert tuple(got.shape) == tuple(ref.shape)
            worst = max(worst, relative_error(got, ref))
    config = json.loads((out / "data_config.json").read_text())
    assert config["data"]["num_samples"] == len(PROMPTS)
    assert config["hidden_states"]["layer_ids"] == LAYERS
    return worst


def test_upstream_shaped_script_writes_oracle_exact_samples(script_run, llama_oracle):
    proc, out = script_run
    worst = worst_error(proc, out, llama_oracle(PROMPTS))
    assert worst <= TOLERANCE, f"max relative error {worst:.2e}"


@pytest.mark.exhaustive
def test_the_script_in_its_own_dtype_agrees_within_bf16_noise(
    line, speculators_dir, tiny_llama, tmp_path, llama_oracle
):
    """What a user's run produces: no dtype override, so vLLM computes in bf16."""
    proc = run_script(
        speculators_dir, tiny_llama, tmp_path, "--tensor-parallel-size", "1", float32=False
    )
    worst = worst_error(proc, tmp_path / "out", llama_oracle(PROMPTS))
    print(f"bf16 run: max relative error {worst:.2e} against transformers float32")
    assert worst <= BF16_TOLERANCE, f"max relative error {worst:.2e}"
    assert worst > TOLERANCE  # it did run in bf16: else this test proves nothing new


@pytest.mark.one_release
@pytest.mark.fault
def test_tensor_parallel_size_zero_is_refused_before_loading(
    line, speculators_dir, tiny_llama, tmp_path
):
    """The script's default on a machine without a GPU: torch.accelerator.device_count()."""
    proc = run_script(speculators_dir, tiny_llama, tmp_path)
    assert proc.returncode != 0
    assert "ValueError: tensor_parallel_size=0 (that is torch.accelerator.device_count()" in (
        proc.stdout
    )
    assert "pass tensor_parallel_size=1 (--tensor-parallel-size 1)" in proc.stdout
    assert "Starting to load model" not in proc.stdout


@pytest.mark.exhaustive
def test_without_the_start_up_hook_the_script_fails(line, speculators_dir, tiny_llama, tmp_path):
    """The proof that the hook is what makes the run work: switched off, the spawned
    workers re-import the script unpatched, and under transformers 5 speculators' import
    fails there.  Under transformers 4 the import works, and speculators 0.4.x
    on vLLM 0.16 (its pinned pair) runs even with an unpatched worker."""
    import transformers

    if int(transformers.__version__.split(".")[0]) < 5 and line != "0.3.0":
        pytest.skip("transformers 4 and speculators 0.4.x: the worker runs even unpatched")
    proc = run_script(
        speculators_dir,
        tiny_llama,
        tmp_path,
        "--tensor-parallel-size",
        "1",
        env={"SPEC_COMPAT_STARTUP": "0"},
    )
    assert proc.returncode != 0
    assert not list((tmp_path / "out").glob("data_*.pt"))


@pytest.mark.fault
@pytest.mark.exhaustive
def test_a_generator_alive_at_exit_leaves_no_traceback(line, speculators_dir, tiny_llama):
    """The stock __del__ logs into torn-down modules at interpreter exit; with the patch the
    exit is quiet, without it the traceback is back."""
    if line != LINES[-1]:
        pytest.skip(f"the same __del__ on both lines: {LINES[-1]} runs it")
    script = Path(__file__).with_name("global_generator_script.py")

    def run(*options: str):
        command = [sys.executable, str(FLOAT32), *options, str(script), str(tiny_llama)]
        return _run_child(command, child_env(speculators_dir), timeout=600)

    quiet = run()
    assert quiet.returncode == 0 and "generated 2" in quiet.stdout, quiet.stdout[-3000:]
    assert "Exception ignored" not in quiet.stdout
    stock = run("--exclude", "generator_quiet_exit")
    assert "Exception ignored in: <function VllmHiddenStatesGenerator.__del__" in stock.stdout
