"""Nothing of a development machine in what is committed or shipped: no absolute path into a
checkout, a home, a virtual environment or a test's temporary folder (generated tables and
JSON carry relative paths or none), and no tracker's issue numbers in the package."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MACHINE_PATH = re.compile(
    r"(?<![\w.~-])/(?:work|root|home|check|Users)/[\w.-]+"  # a checkout or a home
    r"|/tmp/pytest-of-"  # a test's temporary folder
    r"|(?<![\w.-])/[\w./-]*/site-packages/"  # an installed package's folder
)
#: the path scrubber and the tests that feed it such paths on purpose
SCRUBBER = {"tools/compat_report.py", "tests/test_compat_report.py", "tests/test_tracked_files.py"}


def tracked() -> list[str]:
    done = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip("not a git checkout")
    return done.stdout.splitlines()


def test_no_tracked_file_holds_a_machine_path():
    found = []
    for name in tracked():
        path = ROOT / name
        if name in SCRUBBER or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # binary
        found += [f"{name}: {m.group(0)}" for m in MACHINE_PATH.finditer(text)]
    assert not found, found[:20]


def test_the_package_names_no_tracker_issue():
    found = [
        f"{name}: {line.strip()}"
        for name in tracked()
        if name.startswith("src/") and name.endswith(".py")
        for line in (ROOT / name).read_text().splitlines()
        if re.search(r"\bissues? #?\d+", line)
    ]
    assert not found, found
