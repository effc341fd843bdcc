"""No traceback at interpreter exit from the stock generator's ``__del__``.

Target: ``vllm_hidden_states_generator.VllmHiddenStatesGenerator.__del__`` (both lines).
Why: a generator still alive when the interpreter exits (a module-level ``generator = ...``
    in a script) is collected while modules are torn down; the stock ``__del__`` shuts the
    executor down, that fails there, and its handler's ``log.warning`` meets a module whose
    globals are already ``None``: every such run ends with ``Exception ignored in
    VllmHiddenStatesGenerator.__del__ ... AttributeError: 'NoneType' object has no
    attribute 'warning'``, which users read as a crash.
How: while the interpreter is finalizing, the stock ``__del__`` runs with its exceptions
    suppressed (the workers exit with their parent); at any other time it runs unchanged.
Upstream change: none; speculators 0.3.0 and 0.4.x.
Remove when: the extractor shuts its executor down without logging at interpreter exit.
"""

from __future__ import annotations

import contextlib
import sys
from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict, signature_text


def probe(module: ModuleType) -> Verdict:
    delete = getattr(module.VllmHiddenStatesGenerator, "__del__", None)
    if delete is None:
        return Verdict(Need.NOT_NEEDED, "no __del__ on the stock generator")
    return Verdict(Need.NEEDED, f"__del__{signature_text(delete)}", "it logs at exit")


def wrap(original: Any) -> Any:
    # bound now: at exit this module's globals (`sys`, `contextlib`) may already be None
    is_finalizing, suppress = sys.is_finalizing, contextlib.suppress

    def __del__(self: Any) -> None:
        if not is_finalizing():
            original(self)
            return
        with suppress(Exception):
            original(self)

    return __del__


PATCH = declare(
    __name__,
    target="VllmHiddenStatesGenerator.__del__",
    summary="no 'Exception ignored in __del__' traceback when the interpreter exits",
)
