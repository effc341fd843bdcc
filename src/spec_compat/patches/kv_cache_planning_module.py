"""Import the KV-planning helpers from their new module (an import-time patch).

Target: the ``from vllm.v1.core.kv_cache_utils import _get_kv_cache_groups_uniform_spec,
    get_kv_cache_config_from_groups, unify_hybrid_kv_cache_specs`` statement of
    ``vllm_hidden_states_generator`` (speculators 0.3.0 and 0.4.x).
Why: vLLM 0.33 moved these three helpers to ``vllm.v1.core.kv_cache_planning`` with the same
    signatures and left no alias, so importing the stock extractor raises ``ImportError``.
How: just before the stock module is imported, its source is compiled with that one
    ``from … import`` pointing at ``kv_cache_planning`` (names that stayed, if any, still come
    from ``kv_cache_utils``).  Nothing in vLLM is changed; other importers are unaffected.
    Probe: needed only when ``kv_cache_utils`` lacks the names and ``kv_cache_planning`` has
    them all; any other shape is refused.
Upstream change: vLLM 0.33.0, ``vllm/v1/core/kv_cache_planning.py``.
Remove when: the extractor imports from ``kv_cache_planning`` (or stops planning KV itself).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from .. import gates
from ..gates import Need, Verdict
from ..registry import Result, State
from ._stock import GENERATOR


@dataclass(frozen=True)
class ImportPatch:
    """Redirect `from old_module import names` in a stock module to `new_module`."""

    name: str
    module: str
    old_module: str
    new_module: str
    names: tuple[str, ...]
    summary: str
    speculators: str = ""

    def probe(self) -> Verdict:
        old = importlib.import_module(self.old_module)
        missing = [n for n in self.names if not hasattr(old, n)]
        found = f"{self.old_module} lacks {missing or 'nothing'}"
        if not missing:
            return Verdict(Need.NOT_NEEDED, found)
        try:
            new = importlib.import_module(self.new_module)
        except ImportError:
            return Verdict(Need.UNKNOWN, found + f"; no {self.new_module}", "names vanished")
        absent = [n for n in missing if not hasattr(new, n)]
        if absent:
            return Verdict(Need.UNKNOWN, found + f"; {self.new_module} lacks {absent}")
        return Verdict(Need.NEEDED, found + f"; {self.new_module} has them", "helpers moved")

    def decide(self) -> Result:
        target = f"{self.module}: from {self.old_module} import ..."
        if not gates.in_range(gates.speculators_version(), self.speculators):
            return Result(self.name, "driver", target, State.NOT_NEEDED, "other speculators")
        try:
            verdict = self.probe()
        except Exception as exc:
            verdict = Verdict(Need.UNKNOWN, f"{type(exc).__name__}: {exc}", "probe failed")
        state = {
            Need.NEEDED: State.APPLIED,
            Need.NOT_NEEDED: State.NOT_NEEDED,
            Need.UNKNOWN: State.UNSUPPORTED,
            Need.UNDECIDED: State.UNSUPPORTED,
        }[verdict.need]
        return Result(self.name, "driver", target, state, verdict.reason, verdict.found)


IMPORT_PATCH = ImportPatch(
    name="kv_cache_planning_module",
    module=GENERATOR,
    old_module="vllm.v1.core.kv_cache_utils",
    new_module="vllm.v1.core.kv_cache_planning",
    names=(
        "_get_kv_cache_groups_uniform_spec",
        "get_kv_cache_config_from_groups",
        "unify_hybrid_kv_cache_specs",
    ),
    summary="import the KV-planning helpers from kv_cache_planning (moved in 0.33)",
)
