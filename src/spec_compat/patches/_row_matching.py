"""speculators 0.4.x's row-to-request rule, replayed step by step (shm_transport_worker)."""

from __future__ import annotations

from collections import deque
from typing import Any


class RowMatcher:
    """speculators 0.4.x's rule for which captured rows belong to which request, applied step
    by step: the rows of all steps, concatenated, go to the metadata entries of all steps, in
    order, `count` rows each (the stock worker slices the concatenation with one cursor).
    Rows not yet claimed and claims not yet met wait for the next step."""

    def __init__(self) -> None:
        self.claims: deque[list[Any]] = deque()  # [request id, rows still owed]
        self.chunks: deque[list[Any]] = deque()  # per-layer tensors of a step, not yet claimed
        self.offset = 0  # rows of chunks[0] already handed out

    def feed(
        self, layers: list[Any] | None, steps: list[list[tuple[str, int]]]
    ) -> tuple[list[tuple[str, Any, int, int]], list[tuple[list[Any], int, int]]]:
        """Add one step's rows (per-layer tensors) and metadata.  Returns the pieces handed
        out, [(request id, per-layer tensors, first row, row count)] (no tensors and 0 rows
        for a zero-row claim, to which the stock slicing gives an empty chunk), and the row
        ranges they cover, merged [(per-layer tensors, start, end)]."""
        self.claims.extend([req_id, count] for step in steps for req_id, count in step)
        if layers is not None and layers[0].shape[0] > 0:
            self.chunks.append(layers)
        pieces: list[tuple[str, Any, int, int]] = []
        spans: list[tuple[list[Any], int, int]] = []
        while self.claims and (self.chunks or self.claims[0][1] == 0):
            req_id, owed = self.claims[0]
            if owed == 0:
                pieces.append((req_id, None, 0, 0))
                self.claims.popleft()
                continue
            chunk = self.chunks[0]
            take = min(owed, chunk[0].shape[0] - self.offset)
            pieces.append((req_id, chunk, self.offset, take))
            if spans and spans[-1][0] is chunk and spans[-1][2] == self.offset:
                spans[-1] = (chunk, spans[-1][1], self.offset + take)
            else:
                spans.append((chunk, self.offset, self.offset + take))
            self.offset += take
            self.claims[0][1] = owed - take
            if self.claims[0][1] == 0:
                self.claims.popleft()
            if self.offset == chunk[0].shape[0]:
                self.chunks.popleft()
                self.offset = 0
        return pieces, spans

    def unmet(self) -> list[str]:
        """Requests still owed rows at the end of a call (the stock slices come up short)."""
        return [req_id for req_id, _ in self.claims]
