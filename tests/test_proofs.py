"""doctor --model's proof table (spec_compat.models.proofs): generated from the sweep's records,
and read as proven / failed / unproven per vLLM release and speculators line."""

from __future__ import annotations

from spec_compat.models import proofs

RECORDS = [
    {"architecture": "A", "vllm": "0.16.0+cpu", "line": "0.4.0.1", "state": "exact", "reason": ""},
    {"architecture": "A", "vllm": "0.16.0+cpu", "line": "0.3.0", "state": "error",
     "reason": "AssertionError: groups"},
    {"architecture": "B", "vllm": "0.32.0", "line": "0.3.0", "state": "not run",
     "reason": "transformers has no class B"},
    {"architecture": "C", "vllm": "0.32.0", "line": "0.3.0", "state": "exact vs vLLM",
     "reason": "hybrid"},
]  # fmt: skip


def test_each_record_reads_as_proven_failed_or_unproven(monkeypatch):
    monkeypatch.setattr(proofs, "_table", lambda: proofs.table_from_records(RECORDS))
    assert proofs.proof("A", "0.16.0", "0.4.0").state == "proven"  # 0.4.0 reads 0.4.0.1's
    failed = proofs.proof("A", "0.16.0+cpu", "0.3.0")
    assert failed.state == "failed" and "AssertionError: groups" in failed.detail
    assert proofs.proof("C", "0.32.0", "0.3.0").state == "proven"  # bitwise vLLM's own
    unproven = proofs.proof("B", "0.32.0", "0.3.0")
    assert unproven.state == "unproven" and "no class B" in unproven.detail
    assert proofs.proof("A", "0.20.0", "0.3.0").state == "unproven"  # no record of 0.20
    assert proofs.proof("A", "0.16.0", "0.5.0").state == "unproven"  # no such line


def test_matrix_records_read_as_proofs_and_a_failure_outranks_an_exact_record(monkeypatch):
    matrix = [
        {"vllm": "0.13.0", "speculators": "0.3.0", "architecture": "Q", "status": "refused",
         "outcome": "skipped", "reason": "vLLM 0.13.0+cpu's kernel for RMSNorm disagrees"},
        {"vllm": "0.13.0", "speculators": "0.4.0.1", "architecture": "Q", "status": "fail",
         "outcome": "failed", "max_relative_error": 1.06, "reason": "AssertionError"},
        {"vllm": "0.13.0", "speculators": "0.3.0", "architecture": "L", "status": "pass",
         "outcome": "passed", "reference": "vllm"},
        {"vllm": "0.34.0", "speculators": "0.3.0", "status": "doctor ok", "outcome": "doctor"},
    ]  # fmt: skip
    sweep = [{"architecture": "Q", "vllm": "0.13.0", "line": "0.3.0", "state": "exact"}]
    table = proofs.table_from_records(proofs.matrix_records(matrix) + sweep)
    monkeypatch.setattr(proofs, "_table", lambda: table)
    refused = proofs.proof("Q", "0.13.0+cpu", "0.3.0")
    assert (refused.state, refused.measured) == ("failed", "refused")
    assert "RMSNorm" in refused.detail
    assert proofs.proof("Q", "0.13.0", "0.4.0.1").measured == "mismatch"
    assert proofs.proof("L", "0.13.0", "0.3.0").measured == "exact vs vLLM"
    assert "0.34.0" not in table


def test_an_exact_record_of_earlier_code_is_unproven_and_a_failure_stays(monkeypatch):
    records = [
        {"architecture": "A", "vllm": "0.32.0", "line": "0.3.0", "state": "exact"},
        {"architecture": "B", "vllm": "0.32.0", "line": "0.3.0", "state": "mismatch"},
    ]
    table = proofs.table_from_records(records, stale=lambda r: "proven at 1234567")
    monkeypatch.setattr(proofs, "_table", lambda: table)
    stale = proofs.proof("A", "0.32.0", "0.3.0")
    assert (stale.state, stale.measured) == ("unproven", "stale")
    assert "proven at 1234567" in stale.detail and "rehearse" in stale.detail
    assert proofs.proof("B", "0.32.0", "0.3.0").state == "failed"
