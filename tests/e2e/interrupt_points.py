"""Test-only: one generate() call interrupted at many points, each chosen by count.

Ctrl-C lands between two lines of Python.  The driver's code for one call (the stock
generator module, spec_compat, and whatever else `roots` names: vLLM's scheduler and
executor) executes some number of lines; an uninterrupted call (after a first one) counts them
(`sys.settrace`), then the same call is repeated with a real SIGINT raised at line event
`at` for `points` values of `at` spread evenly over the count, caught as a notebook user
catches it, and each is followed by the call once more, which must equal the uninterrupted
call bitwise.  The same count picks the same line every run, so a failure repeats.  The
signal goes through whatever handler is installed at that moment (Python's, which raises
KeyboardInterrupt there, or one that holds it, as `executor_rpc_in_step` does in a reply
wait), as a Ctrl-C from a terminal or Jupyter would.  With `raise_there`, KeyboardInterrupt
is raised at that very line instead, as any exception raised there would be.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any


class LineEvents:
    """Counts the line events executed in code under `roots`; sends this process SIGINT at
    event `stop_at` (a trace function that raises is unset: counting may end there)."""

    def __init__(
        self, roots: tuple[str, ...], stop_at: int | None = None, raise_there: bool = False
    ):
        self.roots, self.stop_at, self.raise_there = roots, stop_at, raise_there
        self.count = 0
        self.where: str | None = None
        self._traced: dict[Any, bool] = {}

    def _call(self, frame, event, arg):
        code = frame.f_code
        traced = self._traced.get(code)
        if traced is None:
            traced = self._traced[code] = code.co_filename.startswith(self.roots)
        return self._line if traced else None

    def _line(self, frame, event, arg):
        if event == "line":
            self.count += 1
            if self.count == self.stop_at:
                code = frame.f_code
                self.where = f"{Path(code.co_filename).name}:{frame.f_lineno} {code.co_name}"
                if self.raise_there:
                    raise KeyboardInterrupt(f"raised at {self.where}")
                signal.raise_signal(signal.SIGINT)
        return self._line

    def __enter__(self) -> LineEvents:
        sys.settrace(self._call)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)


def same(got: list[dict], want: list[dict]) -> bool:
    import torch

    def tensors(result: dict) -> list:
        states = result["hidden_states"]
        return [result["input_ids"], *(states if isinstance(states, list) else [states])]

    return len(got) == len(want) and all(
        len(tensors(g)) == len(tensors(w))
        and all(torch.equal(a, b) for a, b in zip(tensors(g), tensors(w), strict=True))
        for g, w in zip(got, want, strict=True)
    )


def traced_roots(generator_module: str, extra: list[str]) -> tuple[str, ...]:
    import spec_compat

    files = [sys.modules[generator_module].__file__, str(Path(spec_compat.__file__).parent)]
    for name in extra:  # e.g. "vllm.v1.core.sched": a package's folder, or a module's file
        module = __import__(name, fromlist=["_"])
        path = Path(module.__file__)
        files.append(str(path.parent if path.name == "__init__.py" else path))
    return tuple(files)


def run(
    generator: Any,
    prompts: list[list[int]],
    points: int,
    roots: tuple[str, ...],
    raise_there: bool = False,
) -> dict:
    # Ctrl-C as a terminal delivers it: a process started in the background (`&`, as CI
    # runs) inherits SIGINT ignored, and Python then installs no handler
    signal.signal(signal.SIGINT, signal.default_int_handler)
    reference = generator.generate(prompts)
    with LineEvents(roots) as counted:  # a warm call: the first one also initialises things
        repeat = "exact" if same(generator.generate(prompts), reference) else "differs"
    rows = []
    for i in range(1, points + 1):
        # over 90 % of the count: a repeated call may run a few lines fewer (no first-time
        # work, fewer finalizers), and a point past its end would not interrupt it
        at = max(1, round(i * 0.9 * counted.count / points))
        events = LineEvents(roots, stop_at=at, raise_there=raise_there)
        try:
            with events:
                generator.generate(prompts)
            interrupted = None  # held until the call was done, or fewer lines than counted
        except KeyboardInterrupt as exc:
            interrupted = f"KeyboardInterrupt: {exc}"
        except Exception as exc:  # not the interrupt: an earlier point left damage
            interrupted = f"{type(exc).__name__}: {exc}"[:600]
        try:
            after = "exact" if same(generator.generate(prompts), reference) else "differs"
        except (Exception, KeyboardInterrupt) as exc:
            after = f"{type(exc).__name__}: {exc}"[:600]
        rows.append({"at": at, "where": events.where, "interrupted": interrupted, "after": after})
    kept = [{"input_ids": r["input_ids"], "hidden_states": r["hidden_states"]} for r in reference]
    return {"reference": kept, "repeat": repeat, "events": counted.count, "points": rows}
