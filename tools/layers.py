"""The layers of `src/spec_compat` and every import between its parts.

    python tools/layers.py          # each part, its layer, what it imports; exit 1 on a
                                    # wrong import (tests/test_layers.py runs the same check)

A part imports its own modules and parts of lower layers only, at module level and inside
functions alike; nothing inside the package imports the facade (`spec_compat/__init__.py`,
which only re-exports).  docs/architecture.md draws the layers.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

#: lowest first; parts of one layer do not import each other
LAYERS: tuple[tuple[str, ...], ...] = (
    ("engine",),
    ("transport", "models", "data"),
    ("patches",),
    ("api",),
    ("rehearse",),
    ("replicas",),
    ("startup",),
    ("cli",),
    ("__main__",),
)
RANK = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}


def part_of(module: str) -> str | None:
    """The top-level part (`engine`, `api`, ...) of a module under spec_compat; None for
    the facade itself."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else None


def is_module(dotted: str, src: Path) -> bool:
    path = src.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports(path: Path, src: Path = SRC) -> list[tuple[int, str]]:
    """(line, module) for every spec_compat import in `path`, resolved to the module it
    loads: `from spec_compat import api` is `spec_compat.api`, `from spec_compat import
    apply` is the facade."""
    name = ".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "spec_compat"
            ]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] != "spec_compat":
                continue
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.append((node.lineno, child if is_module(child, src) else base))
    return sorted(found)


def modules(src: Path = SRC) -> list[Path]:
    """Every module of the package but the facade."""
    package = src / "spec_compat"
    return sorted(p for p in package.rglob("*.py") if p != package / "__init__.py")


def parts(src: Path = SRC) -> set[str]:
    package = src / "spec_compat"
    found = {p.stem for p in package.glob("*.py")} | {
        p.name for p in package.iterdir() if (p / "__init__.py").is_file()
    }
    return found - {"__init__"}


def wrong_imports(path: Path, src: Path = SRC) -> list[str]:
    """What in `path` goes up, sideways or to the facade."""
    own = part_of(".".join(path.relative_to(src).with_suffix("").parts))
    wrong = []
    for line, target in imports(path, src):
        part = part_of(target)
        if part is None:
            wrong.append(f"line {line}: imports the facade `spec_compat`")
        elif part != own and RANK[part] >= RANK[own]:
            wrong.append(
                f"line {line}: {own} (layer {RANK[own]}) imports {target} (layer {RANK[part]})"
            )
    return wrong


def main() -> int:
    uses: dict[str, set[str]] = defaultdict(set)
    problems = []
    for path in modules():
        own = part_of(".".join(path.relative_to(SRC).with_suffix("").parts))
        uses[own] |= {p for _, t in imports(path) if (p := part_of(t) or "facade") != own}
        problems += [f"{path.relative_to(SRC)}: {w}" for w in wrong_imports(path)]
    for rank, layer in reversed(list(enumerate(LAYERS))):
        for part in layer:
            print(
                f"{rank}  {part:<10} imports {', '.join(sorted(uses[part], key=RANK.get)) or '-'}"
            )
    unlisted = parts() - set(RANK)
    problems += [f"{part}: in no layer (add it to LAYERS)" for part in sorted(unlisted)]
    print("\n".join(problems) or "every import goes down; none reaches the facade")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
