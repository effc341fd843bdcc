"""The walls between spec_compat's packages (tools/layers.py): every import, at module level
or inside a function, goes to the importer's own part or to a lower layer, and nothing
inside the package imports its facade (`spec_compat/__init__.py`) back."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "layers.py"
spec = importlib.util.spec_from_file_location("layers", TOOL)
layers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(layers)


def test_every_part_has_a_layer():
    assert layers.parts() == set(layers.RANK), "add a new part to tools/layers.py's LAYERS"


@pytest.mark.parametrize(
    "path", layers.modules(), ids=lambda p: str(p.relative_to(layers.SRC / "spec_compat"))
)
def test_imports_go_down_and_never_to_the_facade(path):
    assert not layers.wrong_imports(path), "\n".join(layers.wrong_imports(path))


def test_the_rule_catches_a_reach_back(tmp_path):
    """The check itself: an engine module that imports the API or the facade (in a
    function too), and a transport module that imports a part of its own layer."""
    package = tmp_path / "spec_compat"
    for folder in ("engine", "transport", "models"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "api.py").write_text("")
    bad = package / "engine" / "bad.py"
    bad.write_text("def f():\n    from spec_compat import api, apply\n    import spec_compat\n")
    sideways = package / "transport" / "wire.py"
    sideways.write_text("from spec_compat.models import support\n")
    assert layers.imports(bad, tmp_path) == [
        (2, "spec_compat"), (2, "spec_compat.api"), (3, "spec_compat")
    ]  # fmt: skip
    assert len(layers.wrong_imports(bad, tmp_path)) == 3
    assert layers.wrong_imports(sideways, tmp_path) == [
        "line 1: transport (layer 1) imports spec_compat.models (layer 1)"
    ]
