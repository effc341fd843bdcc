"""One progress bar for a whole replicas run, and the line that sums it up.

The bar counts samples on disk across every chunk (the chunks' folders, listed as the
driver polls Ray), so it moves while the scripts write, not only when a chunk ends; its
rate is this invocation's, and its postfix says how many replicas are alive.  tqdm (it comes
with transformers) draws it on a terminal; elsewhere (a log file, CI) tqdm stays quiet and
only the notes (a chunk done, a chunk retried) are printed, one line each.
"""

from __future__ import annotations

import sys
import time
from typing import Any


class Progress:
    def __init__(self, total: int, done: int, replicas: int) -> None:
        self.total, self.first, self.done = total, done, done
        self.replicas, self.alive = replicas, replicas
        self.started = time.monotonic()
        self.bar = _bar(total, done)
        self._postfix()

    def update(self, done: int, alive: int) -> None:
        """`done`: samples on disk now (a repair can take some back); `alive`: replicas
        whose actor is not lost."""
        if self.bar is not None and done != self.done:
            self.bar.update(done - self.done)
        self.done = done
        if alive != self.alive:
            self.alive = alive
            self._postfix()

    def note(self, message: str) -> None:
        """A line above the bar (or alone, without one)."""
        if self.bar is not None:
            self.bar.write(message, file=sys.stderr)
        else:
            print(message, file=sys.stderr, flush=True)

    def close(self, output: str, chunks: int, retried: int, earlier: int) -> str:
        """Ends the bar; the summary line of the run."""
        if self.bar is not None:
            self.bar.close()
        seconds = time.monotonic() - self.started
        made = self.total - self.first
        rate = f"{made / seconds:.2f} samples/s" if seconds > 0 else "-"
        parts = [f"{retried} retried"] if retried else []
        parts += [f"{earlier} done by an earlier run"] if earlier else []
        detail = f" ({', '.join(parts)})" if parts else ""
        return (
            f"spec_compat: {self.total} samples in {output}: {made} written by this run in "
            f"{seconds:.0f} s ({rate}), {self.replicas} replicas, {chunks} chunks{detail}"
        )

    def _postfix(self) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"replicas alive {self.alive}/{self.replicas}")


def _bar(total: int, done: int) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    # disable=None: drawn on a terminal only, so logs get the notes and not carriage returns
    return tqdm(
        total=total, initial=done, unit="sample", desc="replicas", file=sys.stderr, disable=None
    )
