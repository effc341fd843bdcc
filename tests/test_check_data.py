"""`spec-compat check-data` on synthetic sets written as speculators' data script writes
them (scripts/data_generation_offline.py, 0.3.0 and 0.4.0.1): torch.save of
{"input_ids": long [n], "hidden_states": [[n, hidden] per layer], "loss_mask": long [n]},
`sample_lengths.json` (0.4.x: json.dump({index: n}, indent=2)) and `data_config.json`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from spec_compat.data.check import main  # noqa: E402

LAYER_IDS, HIDDEN = [0, 2, 3], 8
LENGTHS = [5, 9, 3, 12, 7, 6, 4, 10]


def sample(i: int, n: int, dtype=torch.float32) -> dict:
    g = torch.Generator().manual_seed(i)
    return {
        "input_ids": torch.as_tensor(torch.randint(0, 100, (n,), generator=g), dtype=torch.long),
        "hidden_states": [torch.randn(n, HIDDEN, generator=g).to(dtype) for _ in LAYER_IDS],
        "loss_mask": torch.tensor([0] * (n // 3) + [1] * (n - n // 3), dtype=torch.long),
    }


def config(line: str, num_samples: int) -> dict:
    """The keys of DataGenerationConfig.to_dict() that a check reads, in its nesting."""
    return {
        "version": "2.0",
        "speculators_version": line,
        "model": {"target_model_path": "tiny", "tensor_parallel_size": 1, "hidden_size": HIDDEN},
        "data": {"train_data_path": "x.jsonl", "seq_length": 64, "num_samples": num_samples},
        "hidden_states": {"layer_ids": LAYER_IDS},
        "format": {"file_pattern": "data_{idx}.pt"},
    }


def write_set(root: Path, line: str = "0.4.0.1", finished: bool = True) -> Path:
    out = root / "out"
    out.mkdir()
    for i, n in enumerate(LENGTHS):
        torch.save(sample(i, n), out / f"data_{i}.pt")
    if finished:
        if line.startswith("0.4"):
            (out / "sample_lengths.json").write_text(json.dumps(dict(enumerate(LENGTHS)), indent=2))
        (out / "data_config.json").write_text(json.dumps(config(line, len(LENGTHS)), indent=2))
    return out


def rewrite(out: Path, i: int, edit) -> None:
    data = torch.load(out / f"data_{i}.pt", weights_only=True)
    edit(data)
    torch.save(data, out / f"data_{i}.pt")


def run(capsys, *args) -> tuple[int, str]:
    code = main([str(a) for a in args])
    return code, capsys.readouterr().out


def rows(text: str) -> list[str]:
    """The table's rows: between its rule and the blank line under it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("----")) + 1
    return lines[start : lines.index("", start)]


@pytest.mark.parametrize("line", ["0.3.0", "0.4.0.1"])
def test_an_intact_set_is_whole(tmp_path, capsys, line):
    out = write_set(tmp_path, line)
    code, text = run(capsys, out)
    assert code == 0, text
    assert "8 samples, whole" in text


def test_a_cut_file_is_named(tmp_path, capsys):
    out = write_set(tmp_path)
    path = out / "data_2.pt"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    code, text = run(capsys, out)
    assert code == 1
    assert [r.split()[:2] for r in rows(text)] == [["data_2.pt", "unreadable"]]


def test_an_empty_file_is_named(tmp_path, capsys):
    out = write_set(tmp_path)
    (out / "data_6.pt").write_bytes(b"")
    code, text = run(capsys, out)
    assert code == 1 and rows(text)[0].split()[:2] == ["data_6.pt", "unreadable"]


def test_a_missing_index_is_named(tmp_path, capsys):
    out = write_set(tmp_path)
    (out / "data_3.pt").unlink()
    (out / "data_7.pt").unlink()  # the last one: only data_config.json's num_samples tells
    code, text = run(capsys, out)
    assert code == 1
    found = [r.split()[:2] for r in rows(text)]
    assert ["data_3.pt", "missing"] in found and ["data_7.pt", "missing"] in found


def test_a_nan_state_is_named(tmp_path, capsys):
    out = write_set(tmp_path)
    rewrite(out, 5, lambda d: d["hidden_states"][1].__setitem__((2, 3), float("nan")))
    code, text = run(capsys, out)
    assert code == 1
    (row,) = rows(text)
    assert row.split()[:3] == ["data_5.pt", "hidden_states[1]", "finite"]
    assert "1 NaN/inf (first at (2, 3))" in row


def test_an_all_zero_row_is_named(tmp_path, capsys):
    out = write_set(tmp_path)
    rewrite(out, 4, lambda d: d["hidden_states"][2][6].zero_())
    code, text = run(capsys, out)
    assert code == 1
    (row,) = rows(text)
    assert row.split()[:2] == ["data_4.pt", "hidden_states[2]"]
    assert "1 zero (first at (6,))" in row


@pytest.mark.parametrize(
    ("edit", "what"),
    [
        (lambda d: d.__setitem__("loss_mask", d["loss_mask"][:-1]), "loss_mask length"),
        (lambda d: d["hidden_states"].__setitem__(0, d["hidden_states"][0][:-2]), "rows"),
        (lambda d: d.__setitem__("input_ids", d["input_ids"][:-1]), "loss_mask length"),
    ],
)
def test_a_length_mismatch_is_named(tmp_path, capsys, edit, what):
    out = write_set(tmp_path)
    rewrite(out, 1, edit)
    code, text = run(capsys, out)
    assert code == 1
    assert any(r.startswith("data_1.pt") and what in r for r in rows(text)), text


def test_a_length_that_disagrees_with_sample_lengths_is_named(tmp_path, capsys):
    out = write_set(tmp_path)
    lengths = json.loads((out / "sample_lengths.json").read_text())
    lengths["6"] = 99
    (out / "sample_lengths.json").write_text(json.dumps(lengths))
    code, text = run(capsys, out)
    assert code == 1
    assert rows(text) == [next(r for r in rows(text) if '"6": 4' in r and '"6": 99' in r)]


def test_layers_hidden_size_and_dtype_are_checked(tmp_path, capsys):
    out = write_set(tmp_path)
    rewrite(out, 2, lambda d: d["hidden_states"].pop())
    rewrite(
        out, 3, lambda d: d.__setitem__("hidden_states", [h[:, :4] for h in d["hidden_states"]])
    )
    rewrite(
        out, 6, lambda d: d.__setitem__("hidden_states", [h.bfloat16() for h in d["hidden_states"]])
    )
    code, text = run(capsys, out)
    assert code == 1
    assert [r.split()[:3] for r in rows(text)] == [
        ["data_2.pt", "layer", "count"],
        ["data_3.pt", "hidden", "size"],
        ["data_6.pt", "dtype", "torch.float32"],
    ]


def test_stray_files_are_named(tmp_path, capsys):
    out = write_set(tmp_path)
    (out / "data_3.pt.tmp").write_bytes(b"x")
    (out / "data_007.pt").write_bytes((out / "data_7.pt").read_bytes())
    (out / "token_freq.pt").write_bytes(b"x")  # the trainer would load it as a sample
    code, text = run(capsys, out)
    assert code == 1
    assert sorted(r.split()[0] for r in rows(text)) == [
        "data_007.pt", "data_3.pt.tmp", "token_freq.pt"
    ]  # fmt: skip


def test_a_killed_run_is_checked_against_itself(tmp_path, capsys):
    """No JSON file: the set is judged by what most samples are, and it is not finished."""
    out = write_set(tmp_path, finished=False)
    rewrite(out, 3, lambda d: d["hidden_states"].append(d["hidden_states"][0]))
    code, text = run(capsys, out, "--json")
    assert code == 1
    report = json.loads(text)
    assert [(p["file"], p["what"]) for p in report["problems"]] == [
        ("data_3.pt", "layer count"),
        ("data_config.json", "absent"),
    ]
    assert report["problems"][0]["expected"] == "3 (the set)"
    assert report["first_bad"] == 3 and report["ok"] is False


def test_json_output_of_an_intact_set(tmp_path, capsys):
    out = write_set(tmp_path)
    code, text = run(capsys, out, "--json")
    assert code == 0
    assert json.loads(text) == {
        "directory": str(out), "ok": True, "files": 8, "expected": 8, "first_bad": None,
        "problems": [],
    }  # fmt: skip


def test_repair_quarantines_from_the_first_bad_index(tmp_path, capsys):
    out = write_set(tmp_path)
    path = out / "data_5.pt"
    path.write_bytes(path.read_bytes()[:100])  # cut
    (out / "data_3.pt").unlink()  # missing: the first bad index
    rewrite(out, 6, lambda d: d["hidden_states"][0].__setitem__((0, 0), float("inf")))
    (out / "notes.txt").write_text("stray")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, text = run(capsys, out, "--repair")
    assert code == 0, text
    quarantine = next((tmp_path / "out.quarantine").iterdir())
    moved = ["data_4.pt", "data_5.pt", "data_6.pt", "data_7.pt", "notes.txt",
             "sample_lengths.json"]  # fmt: skip
    assert sorted(p.name for p in quarantine.iterdir()) == moved
    for name in moved:  # moved, not rewritten, and nothing deleted
        assert (quarantine / name).read_bytes() == before[name]
    assert sorted(p.name for p in out.iterdir()) == [
        "data_0.pt", "data_1.pt", "data_2.pt", "data_config.json", "sample_lengths.json"
    ]  # fmt: skip
    lengths = (out / "sample_lengths.json").read_text()
    assert lengths == json.dumps({0: 5, 1: 9, 2: 3}, indent=2)
    assert "resume now starts at data_3.pt" in text and "notes.txt" in text
    # what the script's resume leaves to do: exactly the indices moved
    code, text = run(capsys, out, "--json")
    problems = json.loads(text)["problems"]
    assert code == 1
    assert [(p["file"], p["what"]) for p in problems] == [("data_3..7.pt (5)", "missing")]


def test_repair_of_a_resumed_04_run_only_completes_the_lengths_file(tmp_path, capsys):
    """A resumed 0.4.x run writes sample_lengths.json with only its own samples."""
    out = write_set(tmp_path)
    (out / "sample_lengths.json").write_text(json.dumps({5: 6, 6: 4, 7: 10}, indent=2))
    code, text = run(capsys, out)
    assert code == 1
    assert rows(text) == ["sample_lengths.json  lengths entry  data_0..4.pt (5) listed  absent"]
    code, text = run(capsys, out, "--repair", "--json")
    assert code == 0
    assert json.loads(text)["repair"]["moved"] == ["sample_lengths.json"]
    assert json.loads((out / "sample_lengths.json").read_text()) == {
        str(i): n for i, n in enumerate(LENGTHS)
    }
    assert run(capsys, out)[0] == 0


def test_repair_of_a_killed_run_redoes_the_last_sample(tmp_path, capsys, monkeypatch):
    """Every index there but no data_config.json: the script's resume would return
    'All samples already processed!' and never write it, so one sample is redone."""
    import importlib.metadata

    # a killed run's files do not name their line: the installed one decides (0.3.0 here,
    # whatever this environment has on its path)
    real = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata, "version", lambda name: "0.3.0" if name == "speculators" else real(name)
    )
    out = write_set(tmp_path, line="0.3.0", finished=False)
    code, text = run(capsys, out, "--repair")
    assert code == 0
    assert "moved 1 file(s)" in text and "resume now starts at data_7.pt" in text
    assert sorted(p.name for p in out.iterdir()) == [f"data_{i}.pt" for i in range(7)]


def test_an_intact_set_needs_no_repair(tmp_path, capsys):
    out = write_set(tmp_path, line="0.3.0")
    code, text = run(capsys, out, "--repair")
    assert code == 0 and "nothing to repair" in text
    assert not (tmp_path / "out.quarantine").exists()


def test_the_command_line_and_a_light_import(tmp_path):
    out = write_set(tmp_path)
    (out / "data_2.pt").unlink()
    proc = subprocess.run(
        [sys.executable, "-m", "spec_compat", "check-data", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1 and "data_2.pt  missing" in proc.stdout, proc.stderr
    probe = "import sys, spec_compat, spec_compat.data.check; print('torch' in sys.modules)"
    light = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert light.stdout.strip() == "False", light.stderr
    assert (
        subprocess.run(
            [sys.executable, "-m", "spec_compat", "check-data", str(tmp_path / "nope")],
            capture_output=True,
        ).returncode
        == 2
    )
