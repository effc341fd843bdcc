"""One `data_N.pt` of speculators' data script, judged on its own (spec-compat check-data).

The format (0.3.0 and 0.4.0.1 alike): {"input_ids": long [n], "hidden_states": [one
[n, hidden] tensor per layer id], "loss_mask": long [n]}.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

KEYS = {"input_ids", "hidden_states", "loss_mask"}


@dataclass(frozen=True)
class Problem:
    file: str
    what: str
    expected: str
    found: str
    #: the sample index it makes bad (repair quarantines from the lowest); None: not a sample
    index: int | None = None


@dataclass(frozen=True)
class Summary:
    """What is kept of a sample once it is judged: the set is checked against itself at
    the end without holding more than one sample in memory."""

    index: int
    layers: int
    hidden: int
    dtype: str
    length: int


def judge(index: int, data: Any, values: bool = True) -> tuple[Summary | None, list[Problem]]:
    """One loaded sample on its own: keys, shapes, lengths, dtypes, finite, no zero rows
    (`values=False`: not the last two, which read every state of a memory-mapped file)."""
    import torch

    name = f"data_{index}.pt"

    def bad(what: str, expected: str, found: str) -> Problem:
        return Problem(name, what, expected, found, index)

    if not isinstance(data, dict) or set(data) != KEYS:
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        return None, [bad("keys", str(sorted(KEYS)), str(found))]
    ids, states, mask = data["input_ids"], data["hidden_states"], data["loss_mask"]
    if not (isinstance(ids, torch.Tensor) and ids.dim() == 1 and len(ids) > 0):
        return None, [bad("input_ids", "a non-empty 1-D tensor", _shape(ids))]
    if not isinstance(states, list | tuple) or not states:
        return None, [bad("hidden_states", "a list of tensors", _shape(states))]
    n, problems = len(ids), []
    if ids.dtype != torch.long:
        problems.append(bad("input_ids dtype", "torch.int64", str(ids.dtype)))
    if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != (n,):
        problems.append(bad("loss_mask length", f"[{n}] (= input_ids)", _shape(mask)))
    elif ((mask != 0) & (mask != 1)).any():
        problems.append(bad("loss_mask values", "0 or 1", str(sorted(set(mask.tolist())))))
    hidden, dtypes = [], []
    for k, h in enumerate(states):
        if not isinstance(h, torch.Tensor) or h.dim() != 2 or h.shape[0] != n:
            problems.append(bad(f"hidden_states[{k}] rows", f"[{n}, hidden]", _shape(h)))
            continue
        hidden.append(h.shape[1])
        dtypes.append(str(h.dtype))
        if not values:
            continue
        finite = torch.isfinite(h)
        if not finite.all():
            problems.append(bad(f"hidden_states[{k}]", "finite", _count(~finite, "NaN/inf")))
        zero = (h == 0).all(dim=1)
        if zero.any():
            problems.append(bad(f"hidden_states[{k}]", "no all-zero row", _count(zero, "zero")))
    if len(set(hidden)) > 1 or len(set(dtypes)) > 1:
        problems.append(bad("layers differ", "one hidden size and dtype", f"{hidden} {dtypes}"))
    if len(hidden) != len(states):
        return None, problems
    summary = Summary(index, len(states), hidden[0], dtypes[0], n)
    return summary, problems


def _shape(x: Any) -> str:
    shape = getattr(x, "shape", None)
    return f"{type(x).__name__} {list(shape)}" if shape is not None else type(x).__name__


def _count(mask: Any, what: str) -> str:
    rows = mask.nonzero()
    return f"{len(rows)} {what} (first at {tuple(rows[0].tolist())})"


def load(path: Path) -> Any:
    import torch

    try:
        return torch.load(path, mmap=True, weights_only=True, map_location="cpu")
    except RuntimeError as error:
        if "mmap" not in str(error):  # a cut file fails here too: only retry the old format
            raise
        return torch.load(path, weights_only=True, map_location="cpu")


def first_line(error: BaseException) -> str:
    text = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return text if len(text) <= 70 else text[:67] + "..."
