"""The walls between spec_compat's packages: every import, at module level or inside a
function, goes to the importer's own package or to a lower layer, and nothing inside the
package imports its facade (`spec_compat/__init__.py`) back."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "spec_compat"

#: lowest first; a part imports only its own modules and parts of lower layers
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


def is_module(dotted: str) -> bool:
    path = SRC.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every spec_compat import in `path`, resolved to the module it
    loads: `from spec_compat import api` is `spec_compat.api`, `from spec_compat import
    apply` is the facade."""
    name = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
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
                found.append((node.lineno, child if is_module(child) else base))
    return found


def modules() -> list[Path]:
    return sorted(
        p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE
    )


def test_every_part_has_a_layer():
    parts = {
        p.name.removesuffix(".py")
        for p in PACKAGE.iterdir()
        if p.suffix == ".py" or (p / "__init__.py").is_file()
    }
    assert parts - {"__init__"} == set(RANK), "add a new part to LAYERS (and docs/architecture.md)"


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_down_and_never_to_the_facade(path):
    importer = ".".join(path.relative_to(SRC).with_suffix("").parts)
    own = part_of(importer)
    wrong = []
    for line, target in imports(path):
        part = part_of(target)
        if part is None:
            wrong.append(f"line {line}: imports the facade `spec_compat`")
        elif part != own and RANK[part] >= RANK[own]:
            wrong.append(
                f"line {line}: {own} (layer {RANK[own]}) imports {target} (layer {RANK[part]})"
            )
    assert not wrong, "\n".join(wrong)


def test_the_rule_catches_a_reach_back(tmp_path):
    """The check itself: an engine module that imports the API, or the facade, is found."""
    engine = tmp_path / "spec_compat" / "engine"
    engine.mkdir(parents=True)
    (tmp_path / "spec_compat" / "__init__.py").write_text("")
    (tmp_path / "spec_compat" / "api.py").write_text("")
    (engine / "__init__.py").write_text("")
    bad = engine / "bad.py"
    bad.write_text("def f():\n    from spec_compat import api, apply\n    import spec_compat\n")
    global SRC
    saved, SRC = SRC, tmp_path
    try:
        found = imports(bad)
    finally:
        SRC = saved
    assert found == [(2, "spec_compat.api"), (2, "spec_compat"), (3, "spec_compat")]
