"""What an attribute patch does to its stock module, and how it is undone exactly.

The registry decides and orders; this module replaces one name at a time and keeps what
`revert()` needs to put back the very objects that were there.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, NamedTuple


def stamp(replacement: Any, original: Any, patch: str) -> Any:
    """Give a replacement what every replacement needs: the original's names (tracebacks,
    pickling by reference, vLLM's lookups by qualified name), `__wrapped__` (doctor, revert
    checks) and the name of the patch that made it.  Proxies (wrapt) carry all that already.
    """
    import contextlib

    import wrapt

    if replacement is original or isinstance(replacement, wrapt.ObjectProxy):
        return replacement
    target = getattr(replacement, "__func__", replacement)  # a classmethod's function
    source = getattr(original, "__func__", original)
    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        with contextlib.suppress(AttributeError, TypeError):
            setattr(target, name, getattr(source, name))
    with contextlib.suppress(AttributeError, TypeError):
        target.__wrapped__ = source
        target.spec_compat_patch = patch
    return replacement


class _Replaced(NamedTuple):
    owner: Any
    attr: str
    original: Any
    had_own: bool  # the owner defined the attribute itself (not inherited)


class Replacements:
    """The names replaced in this process, oldest first."""

    def __init__(self) -> None:
        self._done: list[_Replaced] = []

    def replace(self, module: ModuleType, target: str, wrap: Any, patch: str) -> None:
        """`module.target` (a dotted path) becomes `wrap(original)`, stamped (`stamp`)."""
        *path, attr = target.split(".")
        owner: Any = module
        for part in path:
            owner = getattr(owner, part)
        had_own = attr in vars(owner)
        original = vars(owner)[attr] if had_own else getattr(owner, attr)
        setattr(owner, attr, stamp(wrap(original), original, patch))
        self._done.append(_Replaced(owner, attr, original, had_own))

    def restore(self) -> None:
        """Every replaced name back to the exact original object, newest first."""
        for rec in reversed(self._done):
            if rec.had_own:
                setattr(rec.owner, rec.attr, rec.original)
            else:
                delattr(rec.owner, rec.attr)
        self._done.clear()
