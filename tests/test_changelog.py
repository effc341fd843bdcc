"""CHANGELOG.md follows Keep a Changelog 1.1.0: one [Unreleased], then releases newest first,
each with a version and an ISO date, and no heading twice within a release."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

from packaging.version import Version

CHANGELOG = Path(__file__).resolve().parents[1] / "CHANGELOG.md"
PYPROJECT = CHANGELOG.with_name("pyproject.toml")
RELEASE = re.compile(r"## \[(?P<version>[^\]]+)\] - (?P<date>\d{4}-\d{2}-\d{2})$")
KINDS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def releases(text: str) -> list[tuple[str, list[str]]]:
    """Each `## ` heading with the `### ` headings under it, in file order."""
    found: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("## "):
            found.append((line, []))
        elif line.startswith("### "):
            assert found, f"{line!r} before any release heading"
            found[-1][1].append(line.removeprefix("### "))
    return found


def test_exactly_one_unreleased_section_and_it_comes_first():
    headings = [heading for heading, _ in releases(CHANGELOG.read_text())]
    assert headings.count("## [Unreleased]") == 1
    assert headings[0] == "## [Unreleased]"


def test_release_headings_carry_a_version_and_an_iso_date_newest_first():
    headings = [heading for heading, _ in releases(CHANGELOG.read_text())][1:]
    assert headings, "no release cut yet"
    versions = []
    for heading in headings:
        match = RELEASE.match(heading)
        assert match, f"{heading!r} is not '## [VERSION] - YYYY-MM-DD'"
        datetime.date.fromisoformat(match["date"])  # a real date, not just its shape
        versions.append(Version(match["version"]))
    assert versions == sorted(versions, reverse=True), "releases must be newest first"


def test_no_heading_twice_within_a_release():
    for heading, kinds in releases(CHANGELOG.read_text()):
        assert len(kinds) == len(set(kinds)), f"{heading}: {kinds}"
        assert set(kinds) <= KINDS, f"{heading}: {set(kinds) - KINDS}"


def test_the_newest_release_is_the_packaged_version():
    match = re.search(r'^version = "([^"]+)"', PYPROJECT.read_text(), re.MULTILINE)
    assert match
    newest = RELEASE.match(releases(CHANGELOG.read_text())[1][0])
    assert newest and Version(newest["version"]) <= Version(match[1])


def test_the_checks_catch_what_they_are_for():
    broken = "## [Unreleased]\n### Added\n## [0.1.0] - 2026-12-02\n### Fixed\n### Fixed\n"
    (_, unreleased), (_, release) = releases(broken)
    assert unreleased == ["Added"] and release == ["Fixed", "Fixed"]
    assert not RELEASE.match("## [0.1.0]") and not RELEASE.match("## 0.1.0 - 2026-12-02")
