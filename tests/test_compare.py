"""One comparison and one child environment for `rehearse` and the E2E tests: the test
harness uses spec_compat's own (`rehearsal.worst_error`, `rehearsal.child_env`) with the
tests' tolerance and settings."""

from __future__ import annotations

import pytest

from spec_compat.rehearse import rehearsal

torch = pytest.importorskip("torch")


def results_of(prompts, states):
    return [
        {"input_ids": torch.tensor(ids), "hidden_states": layers}
        for ids, layers in zip(prompts, states, strict=True)
    ]


PROMPTS = [[1, 2, 3], [4, 5]]
REFERENCE = [[torch.ones(3, 4), torch.ones(3, 4)], [torch.ones(2, 4), torch.ones(2, 4)]]


def test_equal_states_have_no_error():
    worst, _ = rehearsal.worst_error(results_of(PROMPTS, REFERENCE), PROMPTS, REFERENCE)
    assert worst == 0.0


def test_the_worst_error_is_located_with_the_callers_tolerance():
    got = [[t.clone() for t in layers] for layers in REFERENCE]
    got[1][1][0, 0] += 5e-5  # prompt 1, second layer, token 0
    results = results_of(PROMPTS, got)
    worst, where = rehearsal.worst_error(results, PROMPTS, REFERENCE, [7, 9], tolerance=1e-5)
    assert worst == pytest.approx(5e-5, rel=1e-2)
    assert where == "prompt 1, layer 9: 1 of 2 tokens differ (first [0])"
    _, loose = rehearsal.worst_error(results, PROMPTS, REFERENCE, [7, 9], tolerance=1e-4)
    assert "0 of 2 tokens" in loose
    report = rehearsal.Rehearsal(model="m")
    assert rehearsal.compare(results, PROMPTS, REFERENCE, [7, 9], report) == worst  # 1e-4
    with pytest.raises(rehearsal.Stop, match="prompt 1, layer 9"):
        rehearsal.compare(results, PROMPTS, REFERENCE, [7, 9], report, tolerance=1e-5)
    assert report.max_relative_error == worst


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda r: r[::-1], "result 0 is not prompt 0"),
        (lambda r: r[:1], "1 results for 2 prompts"),
        (lambda r: [r[0] | {"hidden_states": r[0]["hidden_states"][:1]}, r[1]], "1 layers"),
        (lambda r: [r[0] | {"hidden_states": [torch.ones(3, 5)] * 2}, r[1]], "shape"),
    ],
)
def test_results_that_are_not_the_prompts_are_refused(mangle, message):
    results = mangle(results_of(PROMPTS, REFERENCE))
    with pytest.raises(rehearsal.Stop, match=message):
        rehearsal.worst_error(results, PROMPTS, REFERENCE)


def test_the_test_harness_compares_with_the_library(monkeypatch):
    from e2e import harness

    calls = []
    real = rehearsal.worst_error

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(rehearsal, "worst_error", spy)
    assert harness.compare(results_of(PROMPTS, REFERENCE), PROMPTS, REFERENCE) == 0.0
    assert calls == [{"tolerance": harness.TOLERANCE}]
    with pytest.raises(AssertionError, match="result 0 is not prompt 0"):  # outcome(): mismatch
        harness.compare(results_of(PROMPTS, REFERENCE)[::-1], PROMPTS, REFERENCE)


def test_child_environments(monkeypatch, tmp_path):
    from e2e import harness

    monkeypatch.setenv("SPEC_COMPAT_PATCHES", "a,b")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "40")
    env = rehearsal.child_env(tmp_path)
    assert "SPEC_COMPAT_PATCHES" not in env  # the child applies its own selection
    assert env["PYTHONPATH"] == str(tmp_path)
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "40"  # a user's value is kept by rehearse
    assert env["HF_HUB_OFFLINE"] == "1"
    tests = harness.child_env(tmp_path)
    assert tests["VLLM_CPU_KVCACHE_SPACE"] == "1"  # the tests pin theirs
    pinned = ("VLLM_CPU_KVCACHE_SPACE", "LD_PRELOAD")
    assert {k: v for k, v in tests.items() if k not in pinned} == {
        k: v for k, v in env.items() if k not in pinned
    }
