"""docs/patches.md is generated from the patch declarations (tools/patches_doc.py) and is
current: regenerating it gives the same text."""

from __future__ import annotations

import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "patches_doc.py"


def load_tool():
    spec = importlib.util.spec_from_file_location("patches_doc", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_patches_md_is_current():
    tool = load_tool()
    assert tool.OUTPUT.read_text() == tool.render(), (
        "docs/patches.md is stale: run `python tools/patches_doc.py`"
    )


def test_the_registrys_listing_is_current():
    tool = load_tool()
    assert tool.LISTING.read_text() == tool.render_listing(), (
        "src/spec_compat/patches/_listing.py is stale: run `python tools/patches_doc.py`"
    )


def test_every_declared_patch_has_a_section_with_its_docstring():
    from spec_compat.patches import ALL

    text = load_tool().render()
    for patch in ALL:
        assert f"\n## {patch.name}\n" in text, patch.name
        section = text.split(f"\n## {patch.name}\n", 1)[1].split("\n## ", 1)[0]
        for label in ("Why", "How", "Remove when"):
            assert f"**{label}:**" in section, (patch.name, label)


def test_docstring_sections_keep_lists_and_the_paragraph_after_them():
    tool = load_tool()
    title, sections = tool.docstring_sections(
        "Do a thing.\n\nTarget: ``a.b`` (both).\nHow: first\n    line:\n"
        "    - one\n      more\n    - two\n    After the list.\nRemove when: never.\n"
    )
    assert title == "Do a thing."
    assert sections["Target"] == "`a.b` (both)."
    assert sections["How"] == "first line:\n\n- one more\n- two\n\nAfter the list."
    assert sections["Remove when"] == "never."


def test_a_declaration_without_the_optional_fields_still_renders():
    from types import SimpleNamespace

    bare = SimpleNamespace(
        name="no_such_patch", side="driver", summary="x | y", qualified_target="m.t"
    )
    text = load_tool().render([bare])
    assert "| 1 | [`no_such_patch`](#no_such_patch) | driver | both | x \\| y |" in text
    assert "- **Gates**: both speculators lines; then its probe" in text


def test_the_stacks_section_lists_each_stack_innermost_first():
    from spec_compat.engine import stacks
    from spec_compat.patches import ALL

    text = load_tool().render()
    for target, members in stacks.stacks(list(ALL)):
        line = f"- `{target}`: " + " → ".join(f"`{p.name}`" for p in members)
        assert line in text, target
