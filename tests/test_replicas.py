"""Chunks and the merge of a replicas run (issue 36), on files written here."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch

from spec_compat.data_set import CONFIG, LENGTHS
from spec_compat.replicas.chunks import Chunk, done, grid, placeholder, repair, written
from spec_compat.replicas.merge import IncompleteRun, merge


def sample(folder: Path, index: int, length: int = 3) -> Path:
    path = folder / f"data_{index}.pt"
    ids = torch.arange(index, index + length)
    states = [torch.full((length, 4), float(index))]
    torch.save({"input_ids": ids, "hidden_states": states, "loss_mask": torch.ones(length)}, path)
    return path


def finish(folder: Path, chunk: Chunk, lengths: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for index in chunk.indices():
        sample(folder, index, 2 + index % 3)
    if lengths:
        entries = {str(i): 2 + i % 3 for i in chunk.indices()}
        (folder / LENGTHS).write_text(json.dumps(entries, indent=2))
    config = {"data": {"num_samples": chunk.end}, "reproducibility": {"command": "chunk"}}
    (folder / CONFIG).write_text(json.dumps(config, indent=2))


def test_the_grid_lies_on_the_batch_grid_and_covers_every_sample():
    chunks = grid(100, 8, 2)
    assert chunks[0].start == 0 and chunks[-1].end == 100
    assert all(a.end == b.start for a, b in itertools.pairwise(chunks))
    assert all(c.start % 8 == 0 for c in chunks)
    assert 4 <= len(chunks) <= 7  # about three a replica
    assert grid(0, 8, 2) == []
    assert grid(5, 8, 4) == [Chunk(0, 5)]
    with pytest.raises(ValueError, match="positive"):
        grid(10, 0, 2)


def test_repair_gives_the_script_a_folder_its_resume_finishes(tmp_path):
    chunk, folder, quarantine = Chunk(16, 24), tmp_path / "chunk", tmp_path / "quarantine"
    assert repair(folder, chunk, quarantine) == 16
    assert placeholder(folder, chunk).exists()  # the script's resume starts at 16
    for index in (16, 17, 19):  # 18 never written: a writer thread was killed
        sample(folder, index)
    (folder / "data_20.pt").write_bytes(b"PK\x03\x04 cut")
    assert repair(folder, chunk, quarantine) == 18
    assert written(folder, chunk) == [16, 17]
    assert sorted(p.name for p in quarantine.iterdir()) == ["data_19.pt", "data_20.pt"]
    assert not done(folder, chunk)


def test_a_complete_folder_without_its_config_gives_up_its_last_sample(tmp_path):
    chunk, folder = Chunk(0, 4), tmp_path / "chunk"
    finish(folder, chunk)
    assert done(folder, chunk) and repair(folder, chunk, tmp_path / "q") == 4
    (folder / CONFIG).unlink()
    assert repair(folder, chunk, tmp_path / "q") == 3  # else the script finds nothing to do
    assert written(folder, chunk) == [0, 1, 2]


def test_the_merge_moves_the_samples_and_writes_the_single_runs_files(tmp_path):
    chunks = [Chunk(0, 4), Chunk(4, 8), Chunk(8, 10)]
    folders = [(c, tmp_path / "work" / c.name) for c in chunks]
    for chunk, folder in folders:
        finish(folder, chunk)
        placeholder_file = placeholder(folder, chunk)
        if placeholder_file is not None:
            placeholder_file.touch()
    (folders[1][1] / LENGTHS).write_text("{}")  # a resumed pre-#295 run: entries lost
    before = {i: (tmp_path / "work" / c.name / f"data_{i}.pt").read_bytes()
              for c, _ in folders for i in c.indices()}  # fmt: skip
    out = tmp_path / "out"
    assert merge(folders, out, "script.py --output-dir out") == 10
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([f"data_{i}.pt" for i in range(10)] + [CONFIG, LENGTHS])
    assert all((out / f"data_{i}.pt").read_bytes() == b for i, b in before.items())
    lengths = json.loads((out / LENGTHS).read_text())
    assert lengths == {str(i): 2 + i % 3 for i in range(10)}
    assert list(lengths) == [str(i) for i in range(10)]
    config = json.loads((out / CONFIG).read_text())
    assert config["data"]["num_samples"] == 10
    assert config["reproducibility"]["command"] == "script.py --output-dir out"
    assert not (out / CONFIG).read_text().endswith("\n")  # as the script writes it


def test_an_unfinished_chunk_stops_the_merge_and_a_cut_merge_finishes(tmp_path):
    chunks = [Chunk(0, 2), Chunk(2, 4)]
    folders = [(c, tmp_path / c.name) for c in chunks]
    finish(*folders[0][::-1])
    folders[1][1].mkdir()
    sample(folders[1][1], 2)
    out = tmp_path / "out"
    with pytest.raises(IncompleteRun, match=chunks[1].name):
        merge(folders, out, "cmd")
    assert not out.exists()
    finish(folders[1][1], chunks[1], lengths=False)
    (folders[1][1] / "data_3.pt").rename(out.parent / "elsewhere.pt")  # a merge cut short:
    out.mkdir()
    (out.parent / "elsewhere.pt").rename(out / "data_3.pt")  # one file moved already
    assert merge(folders, out, "cmd") == 4
    assert json.loads((out / LENGTHS).read_text()) == {"0": 2, "1": 3, "2": 4, "3": 2}


def test_the_scripts_own_options_are_read_as_argparse_reads_them():
    from spec_compat.replicas.run import option

    args = ["--output-dir", "a", "--batch-size=4", "--output-dir", "b"]
    assert option(args, "--output-dir") == "b"  # the last one wins
    assert option(args, "--batch-size") == "4"
    assert option(args, "--seed", "0") == "0"


def test_replicas_without_ray_say_how_to_install_it(tmp_path, capsys):
    import importlib.util

    from spec_compat.launcher import main

    if importlib.util.find_spec("ray") is not None:
        pytest.skip("ray is installed here")
    assert main(["--replicas", "2", "script.py", "--output-dir", str(tmp_path)]) == 2
    assert "pip install 'spec-compat[ray]'" in capsys.readouterr().err
