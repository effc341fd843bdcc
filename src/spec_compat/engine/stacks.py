"""Stacks: the patches that wrap one target, in the order their declarations give.

Attribute patches that replace the same name of a stock module, or a class and an attribute
of it, form a stack: each wraps the one applied before it (a class patch subclasses it, a
function patch calls it), so the first applied is the innermost.  Where a patch must stand
relative to another of its stack, that is declared on the patch, as `requires=` is:
`after=` names the patches it wraps, `before=` those that wrap it.  `order()` is a stable
topological sort of every patch by those relations; the listing order (`patches.ORDER`)
only places patches between which nothing is declared, which are independent of each other.

A relation that names an unknown patch or one on another target, and a cycle, raise
`StackError`; so does `superseded_by=` naming an unknown patch or one of another stock
module (a patch and the one that supersedes it are decided together, as their module is
imported).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

from spec_compat.engine.patch import Patch, Result, State


class StackError(ValueError):
    """The declared relations between patches cannot be honoured."""


def stack_of(patch: Any, patches: Sequence[Any]) -> str | None:
    """The qualified target that names `patch`'s stack: the shortest target among `patches`
    that is the patch's own or encloses it (a class for a method).  None: an import-time
    patch, which stacks with nothing."""
    if not isinstance(patch, Patch):
        return None
    enclosing = [
        p.target
        for p in patches
        if isinstance(p, Patch)
        and p.module == patch.module
        and (patch.target == p.target or patch.target.startswith(p.target + "."))
    ]
    return f"{patch.module}.{min(enclosing, key=len)}"


def relations(patches: Sequence[Any]) -> dict[str, set[str]]:
    """patch name -> the names of the patches declared to wrap it; checks every declared
    name (after=, before=, superseded_by=) and raises `StackError` for a broken one."""
    by_name = {p.name: p for p in patches}
    wrapped_by: dict[str, set[str]] = {p.name: set() for p in patches}
    for patch in patches:
        declared = [("after", n) for n in patch.after] + [("before", n) for n in patch.before]
        for field, name in declared + [("superseded_by", n) for n in patch.superseded_by]:
            other = by_name.get(name)
            if other is None:
                raise StackError(
                    f"patch {patch.name!r} declares {field}={name!r}, but no patch {name!r} "
                    f"is registered (known: {', '.join(sorted(by_name))})"
                )
            if field == "superseded_by":
                if other is patch or other.module != patch.module:
                    raise StackError(
                        f"patch {patch.name!r} declares superseded_by={name!r}, which must "
                        f"be another patch of its stock module {patch.module}"
                    )
                continue
            mine, theirs = stack_of(patch, patches), stack_of(other, patches)
            if other is patch or mine is None or mine != theirs:
                raise StackError(
                    f"patch {patch.name!r} declares {field}={name!r}, but {name!r} wraps "
                    f"{theirs or other.qualified_target}, not {mine or patch.qualified_target}: "
                    "after=/before= name patches of the same target"
                )
            inner, outer = (name, patch.name) if field == "after" else (patch.name, name)
            wrapped_by[inner].add(outer)
    for patch in patches:  # deciding who supersedes whom must end
        seen, todo = set(), list(patch.superseded_by)
        while todo:
            if (name := todo.pop()) == patch.name:
                raise StackError(f"the superseded_by= relations form a cycle through {name!r}")
            if name not in seen:
                seen.add(name)
                todo.extend(by_name[name].superseded_by)
    return wrapped_by


def order(patches: Sequence[Any]) -> list[Any]:
    """Every patch in application order: after every patch it is declared to wrap (and
    before those declared to wrap it), otherwise in the order given; `StackError` on a
    cycle."""
    wrapped_by = relations(patches)
    index = {p.name: i for i, p in enumerate(patches)}
    waiting = dict.fromkeys(index, 0)  # how many declared inner patches are not placed yet
    for outers in wrapped_by.values():
        for name in outers:
            waiting[name] += 1
    ready = [index[name] for name, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    placed = []
    while ready:
        patch = patches[heapq.heappop(ready)]
        placed.append(patch)
        for name in wrapped_by[patch.name]:
            waiting[name] -= 1
            if waiting[name] == 0:
                heapq.heappush(ready, index[name])
    if len(placed) < len(patches):
        raise StackError(
            "the declared after=/before= relations form a cycle: "
            + " wraps ".join(_cycle(wrapped_by, {n for n, w in waiting.items() if w}))
        )
    return placed


def _cycle(wrapped_by: dict[str, set[str]], stuck: set[str]) -> list[str]:
    """One cycle among the patches a topological sort could not place, outermost first:
    each of them waits for a patch it wraps that is itself stuck."""
    wraps = {n: sorted(i for i, outers in wrapped_by.items() if n in outers) for n in stuck}
    path, name = [], min(stuck)
    while name not in path:
        path.append(name)
        name = next(i for i in wraps[name] if i in stuck)
    return [*path[path.index(name) :], name]


def stacks(patches: Sequence[Any]) -> list[tuple[str, list[Any]]]:
    """Every target that more than one patch wraps, with its patches innermost first (in
    application order), in the order the stacks' first patches are applied."""
    found: dict[str, list[Any]] = {}
    for patch in order(patches):
        if (target := stack_of(patch, patches)) is not None:
            found.setdefault(target, []).append(patch)
    return [(target, members) for target, members in found.items() if len(members) > 1]


def supersede(found: dict[str, Result], patches: dict[str, Any], earlier: dict[str, Result]):
    """Mark each patch in `found` (just decided, to be applied) that a patch applying here
    supersedes (`superseded_by=`, checked acyclic by `relations`) `State.SUPERSEDED`."""

    def applies(name: str) -> bool:  # once superseding is settled
        result = found.get(name) or earlier.get(name)
        if result is None or result.state is not State.APPLIED:
            return False
        return not any(applies(n) for n in patches[name].superseded_by)

    superseded = {name: [n for n in patches[name].superseded_by if applies(n)] for name in found}
    for name, by in superseded.items():
        if by and found[name].state is State.APPLIED:
            found[name].state = State.SUPERSEDED
            found[name].reason = f"superseded by {', '.join(by)} ({found[name].reason})"


def described(found: list[tuple[str, list[Any]]], states: dict[str, State]) -> list[dict[str, Any]]:
    """doctor's record of `stacks()`: each target and its patches, innermost first, with
    their states ("-": not selected)."""

    def state(name: str) -> str:
        return states[name].value if name in states else "-"

    return [
        {"target": target, "patches": [{"name": p.name, "state": state(p.name)} for p in members]}
        for target, members in found
    ]


def rendered(described: list[dict[str, Any]]) -> list[str]:
    """doctor's table of the stacks."""
    if not described:
        return []
    width = max(len(p["name"]) for stack in described for p in stack["patches"])
    lines = ["", "stacks (innermost first: each patch wraps the ones above it)"]
    for stack in described:
        lines.append(f"  {stack['target']}")
        lines += [f"    {p['name']:<{width}}  {p['state']}" for p in stack["patches"]]
    return lines
