"""The value test of captured rows: NaN/Inf and all-zero rows, by two reductions a row.

`generate_checks` runs it on the driver's results; the shared-memory transport's workers
run it on the device as rows are captured, so the driver may skip its pass.
"""

from __future__ import annotations

from typing import Any


def row_faults(tensor: Any) -> tuple[Any, Any]:
    """Per row: (holds a NaN/Inf, is all zeros).  From each row's max and min, where NaN/Inf
    propagate and an all-zero row has both 0: no temporary the size of the states."""
    return _faults(tensor.amax(dim=-1), tensor.amin(dim=-1))


def _faults(high: Any, low: Any) -> tuple[Any, Any]:
    import torch

    return ~(torch.isfinite(high) & torch.isfinite(low)), (high == 0) & (low == 0)


def bad_row_flags(layers: list[Any]) -> Any:
    """Per row of a step's captured layers: does `row_faults` find it in any layer (a bool
    tensor on their device; no synchronisation): the worker's half of `generate_checks`,
    in ~20 kernel launches a step however many requests share it."""
    import torch

    nonfinite, zero = _faults(
        torch.stack([t.amax(dim=-1) for t in layers]),
        torch.stack([t.amin(dim=-1) for t in layers]),
    )
    return (nonfinite | zero).any(dim=0)
