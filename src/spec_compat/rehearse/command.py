"""`python -m spec_compat rehearse PATH|EXAMPLE [--layer-ids K ...] [--tensor-parallel-size N]
[--max-model-len N] [--json]`: the whole extraction, rehearsed in about a minute on a shrunken
random copy of the model's architecture, before anyone loads the real weights.

Only `PATH/config.json` and the tokenizer files beside it are read.  The copy
(`miniature.py`) runs through the *stock* extractor under `spec_compat.apply()` on the
installed vLLM and speculators, with the given tensor parallel size and maximum length, on
prompts that cross a scheduler step, and its states are compared with an independent
reference (`child.py`): transformers in float32, or vLLM's own EAGLE-3 aux hidden
states for MLA models (vLLM's CPU MLA kernels are not transformers' computation).  A gap to
transformers too small to be a misplaced row is told apart: each prompt alone, the
extraction must be bitwise vLLM's own aux states (`_tell_apart`).
EXAMPLE names a config shipped with spec_compat (`--examples` lists them).
Exit codes as `doctor`'s: 0 pass; 1 the extraction cannot be trusted (an architecture or
layer ids refused, an error in the extractor, states unlike the reference); 2 an
environment problem (no config.json, vLLM or speculators missing, no copy buildable here).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from spec_compat.rehearse.rehearsal import (
    BATCH_NOISE,
    CAPTURE_SCALE,
    ENVIRONMENT,
    PASS,
    TOLERANCE,
    UNTRUSTED,
    Child,
    Rehearsal,
    Stop,
    compare,
    worst_error,
)

__all__ = ["TOLERANCE", "Rehearsal", "compare", "rehearse"]

EXAMPLES = Path(__file__).with_name("examples")
#: the stock extractor's scheduler budget per step (MIN_MAX_BATCHED_TOKENS in both lines)
STOCK_STEP_TOKENS = 8192


def source_of(target: str) -> Path:
    """The model directory, or the shipped example of that name."""
    path = Path(target)
    for candidate in (path, EXAMPLES / target):
        if (candidate / "config.json").is_file():
            return candidate
    raise Stop(
        ENVIRONMENT,
        f"{target}: no config.json there (a local model directory, or one of the examples: "
        f"{', '.join(examples())})",
    )


def examples() -> list[str]:
    return sorted(p.name for p in EXAMPLES.iterdir() if (p / "config.json").is_file())


def _versions(report: Rehearsal) -> None:
    from importlib import metadata, util

    from spec_compat.engine.versions import vllm_version

    for name in ("vllm", "speculators"):
        if util.find_spec(name) is None:
            raise Stop(ENVIRONMENT, f"{name} is not importable here: install it first")
    report.vllm = str(vllm_version())
    try:
        report.speculators = metadata.version("speculators")
    except metadata.PackageNotFoundError:
        report.speculators = "unknown"


def _route(config: dict[str, Any], layer_ids: list[int] | None, extractor: Child) -> Any:
    """Layer ids against the real depth at once, then the capture's route for the
    architecture as the extractor's process (which imports vLLM anyway) found it."""
    from spec_compat.models.support import UnsupportedModel, check_layer_ids, text_layers

    depth = text_layers(config)
    try:
        check_layer_ids(layer_ids, depth)
    except UnsupportedModel as exc:
        raise Stop(UNTRUSTED, str(exc)) from None
    outside = [k for k in layer_ids or () if depth and not 0 <= k < depth]
    if outside:  # the copy's mapping would hide it; the stock generator refuses it
        raise Stop(UNTRUSTED, f"layer_ids {layer_ids}: {outside} outside 0..{depth - 1}")
    facts = extractor.preflight()
    if not facts["route"]["served"]:
        raise Stop(UNTRUSTED, f"{facts['route']['architecture']}: {facts['route']['reason']}")
    return facts, facts["route"]["reason"]


def _build(source: Path, directory: Path, tensor_parallel_size: int) -> tuple[Any, str]:
    from spec_compat.rehearse import miniature

    try:
        copy = miniature.build(source, directory, tensor_parallel_size)
    except LookupError as exc:
        raise Stop(ENVIRONMENT, str(exc)) from None
    except Exception as exc:
        what = f"{type(exc).__name__}: {exc}"
        raise Stop(ENVIRONMENT, f"no random copy could be built: {what}") from None
    return copy, str(directory)


def prompts_for(vocab: int, max_model_len: int, seed: int = 0) -> list[list[int]]:
    """Long prompts whose sum crosses the stock scheduler's step, and two short ones."""
    rng = random.Random(seed)
    long = min(max_model_len - 1, 1500)
    lengths = [2, *[long] * (STOCK_STEP_TOKENS // long + 1), 7]
    return [[rng.randrange(4, vocab) for _ in range(n)] for n in lengths]


def stock_selection(layers: int) -> list[int]:
    """The layers both stock lines pick when given none."""
    return [2, layers // 2, layers - 3, layers - 1]


def rehearse(
    target: str,
    layer_ids: list[int] | None = None,
    tensor_parallel_size: int = 1,
    max_model_len: int = 2048,
    max_num_batched_tokens: int | None = None,
) -> Rehearsal:
    report = Rehearsal(model=target)
    started = time.perf_counter()
    children: list[Child] = []  # stopped before their working directory goes
    try:
        with tempfile.TemporaryDirectory(prefix="spec-compat-rehearsal-") as tmp:
            try:
                _rehearse(report, target, layer_ids, tensor_parallel_size, max_model_len,
                          max_num_batched_tokens, Path(tmp), children)  # fmt: skip
            finally:
                for child in children:
                    child.stop()
    except Stop as stop:
        report.error, report.exit_code = str(stop), stop.exit_code
    report.seconds = time.perf_counter() - started
    return report


def _rehearse(
    report, target, layer_ids, tensor_parallel_size, max_model_len, step_tokens, workdir, children
) -> None:
    source = report.timed("read config", lambda: (source_of(target), ""))
    config = json.loads((source / "config.json").read_text())
    report.architecture = (config.get("architectures") or ["?"])[0]
    _versions(report)
    # vLLM is imported once, by the extractor's own process, started now
    extractor = Child.start("extract", workdir, config.get("architectures") or [])
    children.append(extractor)
    # the copy is built while that process imports vLLM (it is only used once the route
    # is clear, and takes less time than the import, so a refusal comes no later)
    with ThreadPoolExecutor(1) as pool:
        building = pool.submit(_build, source, workdir / "model", tensor_parallel_size)
        facts = report.timed("route", _route, config, layer_ids, extractor)
        copy = report.timed("build copy", building.result)
    report.copy = copy.notes
    if copy.mla and facts["cpu"] and not facts["cpu_mla_backend"]:
        raise Stop(ENVIRONMENT, "this vLLM's CPU build has no MLA attention backend (0.28+)")
    backend = "CPU_MLA" if copy.mla and facts["cpu"] else None  # AMX MLA: bf16 only
    hybrid = facts["route"]["hybrid"]
    # vLLM's CPU kernels for state layers (Gated DeltaNet) take bf16 only: the extractor
    # and vLLM's own states then run in bf16 alike
    dtype = "bfloat16" if hybrid and facts["cpu"] else "float32"
    # the stock extractor sends text only; without the source's processor vLLM cannot build
    # a wrapper's towers, so the copy is served as a language model, through the wrapper
    options = {}
    if copy.multimodal and not copy.processor:
        if not facts["language_model_only"]:
            raise Stop(ENVIRONMENT, "a multimodal wrapper needs its processor files beside "
                       "config.json (preprocessor_config.json) on this vLLM")  # fmt: skip
        options = {"language_model_only": True}
        report.copy.append("no processor files: the wrapper's text path (language_model_only)")
    prompts = prompts_for(copy.prompt_vocab, max_model_len)
    # vLLM's CPU MLA prefill depends on the batch (docs/models.md), and a hybrid model's
    # state layers round their carried state where a step cuts a prompt: the reference
    # runs each prompt alone, so the extractor does too
    alone = backend or hybrid
    calls = [[i] for i in range(len(prompts))] if alone else [list(range(len(prompts)))]
    spec = {
        "model": str(copy.directory),
        "prompts": prompts,
        "layers": copy.map_layers(layer_ids or stock_selection(copy.layers)),
        "max_model_len": max_model_len,
        "tensor_parallel_size": tensor_parallel_size,
        "calls": calls,
        "attention_backend": backend,
        "dtype": dtype,
        "max_num_batched_tokens": step_tokens,  # None: the stock step size
        "model_options": options,
    }
    tokens = sum(map(len, prompts))
    extractor.run(spec)

    # transformers cannot be the reference where vLLM's kernels may rightly differ from it:
    # MLA (vLLM's CPU MLA kernels) and routed experts (a near-tied router score picks
    # another expert for a token); vLLM's own states then, from an engine of its own
    # started now, beside the extractor
    native = None
    if copy.mla or copy.routed_experts or hybrid:
        native = Child.start("native", workdir)
        native.run(spec)
        children.append(native)
        why = "MLA" if copy.mla else "hybrid" if hybrid else "routed experts"
        report.reference = f"vLLM's own EAGLE-3 aux hidden states ({dtype}; {why})"
    else:
        report.reference = "transformers (float32)"

    def extract():
        detail = f"{len(prompts)} prompts, {tokens} tokens, {len(calls)} generate() call(s)"
        return extractor.finish(report), detail

    extracted = report.timed("extract", extract)
    layers = extracted["layers"]
    report.layer_ids = {
        "asked": layer_ids or stock_selection(copy.layers),
        "stock_selection": layer_ids is None,
        "rehearsed": layers,
    }

    def reference():
        if native is not None:
            return native.finish(report), "beside the extractor"
        from spec_compat.rehearse.child import oracle

        return oracle(copy.directory, prompts, layers), ""

    expected = report.timed("reference", reference)
    try:
        report.timed(
            "compare",
            lambda: (compare(extracted["results"], prompts, expected, layers, report), ""),
        )
    except Stop:
        off = report.max_relative_error
        if native is not None or off is None or off > CAPTURE_SCALE:
            raise  # a capture error (rows lost, shifted, swapped), or vLLM's own was the bar
        report.timed(
            "tell apart", _tell_apart, spec, extracted["results"], workdir, report, children
        )


def _tell_apart(
    spec: dict[str, Any], batched: list[Any], workdir: Path, report: Rehearsal, children: list
) -> tuple[None, str]:
    """transformers and the extraction differ by more than TOLERANCE but far less than a
    misplaced row: vLLM's forward, or the capture?  vLLM's CPU kernels round differently
    with the batch's composition and drift from transformers with depth and length (Gemma 4's
    sliding window on 1,500-token prompts: 2e-04 on random weights).  So the stock extractor
    runs again with each prompt alone, as vLLM's own engine runs them, and must equal vLLM's
    own aux states bitwise; the batched extraction must then lie within BATCH_NOISE of them."""
    where = workdir / "alone"
    where.mkdir()
    alone = spec | {"calls": [[i] for i in range(len(spec["prompts"]))]}
    extractor, native = Child.start("extract", where), Child.start("native", where)
    children += [extractor, native]
    extractor.run(alone)
    native.run(alone)
    mine, theirs = extractor.finish(report)["results"], native.finish(report)
    prompts, layers = spec["prompts"], report.layer_ids["rehearsed"]
    off = report.max_relative_error
    exact, at = worst_error(mine, prompts, theirs, layers, tolerance=0.0)
    if exact != 0.0:
        raise Stop(
            UNTRUSTED,
            f"states differ from transformers ({off:.1e}) and, each prompt "
            f"alone, from vLLM's own aux states ({exact:.1e} at copy {at}): the capture",
        )
    drift, at = worst_error(batched, prompts, theirs, layers, tolerance=BATCH_NOISE)
    if drift > BATCH_NOISE:
        raise Stop(
            UNTRUSTED,
            f"each prompt alone, the capture is bitwise vLLM's own aux states, "
            f"but the batched extraction is {drift:.1e} off them at copy {at}",
        )
    report.reference = (
        f"transformers (float32): {off:.1e} off, vLLM's forward and not the capture: each "
        "prompt alone, the extraction is bitwise vLLM's own aux states, and batched within "
        f"{drift:.1e} of them (vLLM's kernels round with the batch)"
    )  # fmt: skip
    compared = next(step for step in report.steps if step.name == "compare")
    compared.ok, compared.detail = True, f"transformers {off:.1e} off: told apart below"
    return None, f"bitwise vLLM's own aux states alone; batched {drift:.1e} off them"


def render(report: Rehearsal) -> str:
    lines = [
        f"spec_compat rehearse {report.model}: {report.architecture or '?'} on vLLM "
        f"{report.vllm or '?'}, speculators {report.speculators or '?'}",
        *(f"  copy: {note}" for note in report.copy),
    ]
    if report.layer_ids:
        ids = report.layer_ids
        lines.append(
            f"  layer ids: {ids['asked']}{' (the stock selection)' * ids['stock_selection']} "
            f"-> {ids['rehearsed']} on the copy"
        )
    if report.reference:
        lines.append(f"  reference: {report.reference}")
    for step in report.steps:
        mark = "ok  " if step.ok else "FAIL"
        lines.append(f"  {mark} {step.name:<12} {step.seconds:6.1f} s  {step.detail}")
    if report.max_relative_error is not None:
        told = any(step.name == "tell apart" and step.ok for step in report.steps)
        lines.append(
            f"  max relative error {report.max_relative_error:.1e} (tolerance {TOLERANCE:.0e})"
            + (": vLLM's forward against transformers, told apart from the capture" * told)
        )
    if report.patches_involved:
        lines.append(f"  patches involved: {', '.join(report.patches_involved)}")
    verdict = {PASS: "PASS", UNTRUSTED: "FAIL", ENVIRONMENT: "CANNOT REHEARSE HERE"}
    lines.append(f"{verdict[report.exit_code]} in {report.seconds:.0f} s")
    if report.error:
        lines.append(f"  {report.error}")
        lines.extend(f"    | {line}" for line in report.log_tail[-12:])
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="spec_compat rehearse", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("model", nargs="?", help="model directory (config.json) or example name")
    parser.add_argument("--layer-ids", type=int, nargs="+", help="the real model's layer ids")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument(
        "--max-num-batched-tokens", type=int, help="the generator's step size (speculators 0.4.x)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable report")
    parser.add_argument("--examples", action="store_true", help="list the shipped examples")
    args = parser.parse_args(argv)
    if args.examples or not args.model:
        print("\n".join(examples()))
        return PASS if args.examples else ENVIRONMENT
    # vLLM logs to stdout and binds the stream when first imported: keep stdout for the report
    with contextlib.redirect_stdout(sys.stderr):
        report = rehearse(
            args.model, args.layer_ids, args.tensor_parallel_size, args.max_model_len,
            args.max_num_batched_tokens,
        )  # fmt: skip
    print(json.dumps(asdict(report), indent=2) if args.json else render(report))
    return report.exit_code
