"""In a replicas run, hand each copy of the unchanged data script its part of the dataset.

Target: ``speculators.data_generation.preprocessing.load_and_preprocess_dataset`` (both
    lines; the data script imports it by name, after ``apply()``).
Why: ``spec-compat run --replicas N`` (``spec_compat.replicas``) runs N copies of the
    unchanged script, each on a chunk [start, end) of the dataset.  The script's resume
    gives it the start (a placeholder file); it has no argument for the end.
How: selected only in a process whose ``SPEC_COMPAT_REPLICA`` names a plan or a chunk (the
    replicas driver sets it and ``spec-compat run`` adds the patch there: ``default=False``,
    so no other run, nor doctor, imports speculators' preprocessing and its ``datasets``).
    The original function runs unchanged (tokenization and the token frequencies cover the
    whole set, as in one run); then a plan step records the dataset's length and the
    script's arguments and ends the script before vLLM starts, and a chunk run checks that
    length and gets the dataset cut at its end (``Dataset.select``), so the script's own
    loop stops there.
Upstream change: none; speculators' data script has no range arguments.
Remove when: the data script takes a sample range itself.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from spec_compat.engine.names import ENV_REPLICA
from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict, signature_text


def probe(module: ModuleType) -> Verdict:
    found = f"load_and_preprocess_dataset{signature_text(module.load_and_preprocess_dataset)}"
    if not os.environ.get(ENV_REPLICA):
        return Verdict(Need.NOT_NEEDED, found, "not a replicas run")
    return Verdict(Need.NEEDED, found, "a replicas run: this process writes one chunk")


def wrap(original: Any) -> Any:
    def load_and_preprocess_dataset(*args: Any, **kwargs: Any) -> Any:
        dataset, tokenizer = original(*args, **kwargs)
        role = json.loads(os.environ[ENV_REPLICA])
        if role["mode"] == "plan":
            plan = {"samples": len(dataset), "argv": sys.argv, "call": _jsonable(kwargs)}
            Path(role["plan"]).write_text(json.dumps(plan, indent=2))
            raise SystemExit(0)  # planned: the replicas start vLLM, not this process
        if len(dataset) != role["samples"]:
            raise RuntimeError(
                f"spec_compat: this replica's dataset has {len(dataset)} samples, the plan "
                f"{role['samples']}: the data, tokenizer or arguments changed since the plan"
            )
        return dataset.select(range(role["end"])), tokenizer

    return load_and_preprocess_dataset


def _jsonable(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v if isinstance(v, (str, int, float, bool, type(None))) else repr(v)
            for k, v in kwargs.items()}  # fmt: skip


PATCH = declare(
    __name__,
    module="speculators.data_generation.preprocessing",
    target="load_and_preprocess_dataset",
    summary="replicas runs: each copy of the data script gets its chunk of the dataset",
    default=False,
)
