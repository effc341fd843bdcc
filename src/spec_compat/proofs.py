"""What the architecture sweep measured for each class, per vLLM release and speculators
line: the proof `doctor --model` reports before anyone loads a model.

`proofs.json` is written from the sweep's records by `tools/compat_report.py --sweep` (as
docs/models.md is): `{vLLM release: {architecture: {line: [state, reason]}}}`.  A class is
proven where the unchanged stock extractor gave exact states (against transformers, or
bitwise vLLM's own aux states); a measured error or mismatch refuses it; anything else
(not run, or no record for this release) is unproven, and `rehearse` is the way to prove it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, NamedTuple

PROOFS = Path(__file__).with_name("proofs.json")
EXACT = ("exact", "exact vs vLLM")
FAILED = ("error", "mismatch")


class Proof(NamedTuple):
    state: str  # proven | failed | unproven
    detail: str


@functools.cache
def _table() -> dict[str, Any]:
    return json.loads(PROOFS.read_text()) if PROOFS.exists() else {}


def release(version: str) -> str:
    """`0.16.0+cpu` and `0.16.0` are one release."""
    return version.split("+", 1)[0]


def table_from_records(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The sweep's records (docs/architectures.json) as `proofs.json` holds them."""
    table: dict[str, Any] = {}
    for r in records:
        row = table.setdefault(release(r["vllm"]), {}).setdefault(r["architecture"], {})
        row[r["line"]] = [r["state"], "" if r["state"] in EXACT else r.get("reason", "")]
    return table


def proof(architecture: str, vllm: str, speculators: str | None) -> Proof:
    """The sweep's verdict on `architecture` for this vLLM release and speculators line
    (the recorded line of the same minor version)."""
    rows = _table().get(release(vllm), {})
    if architecture not in rows:
        return Proof("unproven", f"the architecture sweep has no record of it on vLLM {vllm}")
    lines = rows[architecture]
    minor = ".".join((speculators or "").split(".")[:2])
    line = next((k for k in lines if k.startswith(minor + ".")), None) if minor else None
    state, reason = lines[line] if line else (None, "")
    where = f"vLLM {release(vllm)}, speculators {line}"
    if state in EXACT:
        return Proof("proven", f"exact in the architecture sweep ({where})")
    if state in FAILED:
        return Proof("failed", f"the architecture sweep measured {state} ({where}): {reason}")
    return Proof("unproven", f"not run in the sweep ({where}): {reason or 'no record'}")
