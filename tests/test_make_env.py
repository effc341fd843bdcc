"""tools/make_env.py: requirements the package index does not serve are left out and named,
anything else fails (no network: the resolver is faked with uv's own wording)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "make_env", Path(__file__).resolve().parent.parent / "tools" / "make_env.py"
)
make_env = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_env)


def _no_version(req: str) -> str:
    return (
        f"  cause: Because there is no version of {req} and you require {req}, we can "
        "conclude that your requirements are unsatisfiable."
    )


def fake_resolver(unserved: dict[str, str]):
    """An install that fails, as uv words it, while a requirement naming a key of
    `unserved` is asked for; the value is the error.  Records every try."""
    tries: list[list[str]] = []

    def install(requirements: list[str]) -> str | None:
        tries.append(list(requirements))
        for name, error in unserved.items():
            if any(r.split("[")[0].split("=")[0].split(">")[0] == name for r in requirements):
                return error
        return None

    return install, tries


def test_unserved_pins_are_left_out_and_named(capsys):
    install, tries = fake_resolver(
        {
            "flashinfer-python": _no_version("flashinfer-python==0.7.3"),
            "tokenspeed-mla": "  cause: Because tokenspeed-mla was not found in the package "
            "registry and you require tokenspeed-mla==2.0.3, we can conclude that your "
            "requirements are unsatisfiable.",
        }
    )
    deps = ["regex", "flashinfer-python==0.7.3", "numba==0.65.0", "tokenspeed-mla==2.0.3"]
    left_out = make_env.install_available(install, ["torch==2.14.0"], deps)
    assert left_out == ["flashinfer-python==0.7.3", "tokenspeed-mla==2.0.3"]
    assert tries[-1] == ["torch==2.14.0", "regex", "numba==0.65.0"]
    log = capsys.readouterr().out
    assert "left out flashinfer-python==0.7.3" in log
    assert "left out tokenspeed-mla==2.0.3" in log


def test_a_requirement_whose_own_dependency_is_unserved_is_left_out():
    error = (
        "  cause: Because there is no version of cuda-kernels==1.0 and "
        "humming-kernels[cu13]==0.1.19 depends on cuda-kernels==1.0, we can conclude that "
        "humming-kernels[cu13]==0.1.19 cannot be used.\n      And because you require "
        "humming-kernels[cu13]==0.1.19, we can conclude that your requirements are "
        "unsatisfiable."
    )
    install, _ = fake_resolver({"humming-kernels": error})
    deps = ["einops", "humming-kernels[cu13]==0.1.19"]
    assert make_env.install_available(install, [], deps) == ["humming-kernels[cu13]==0.1.19"]


def test_no_wheel_for_this_python_counts_as_unserved():
    error = (
        "  cause: Because tilelang==0.1.12 has no wheels with a matching Python ABI tag and "
        "you require tilelang==0.1.12, we can conclude that your requirements are "
        "unsatisfiable."
    )
    install, _ = fake_resolver({"tilelang": error})
    assert make_env.install_available(install, [], ["tilelang==0.1.12"]) == ["tilelang==0.1.12"]


def test_everything_served_leaves_nothing_out():
    install, tries = fake_resolver({})
    assert make_env.install_available(install, ["pytest"], ["regex", "numpy"]) == []
    assert len(tries) == 1


@pytest.mark.parametrize(
    "error",
    [
        # a real conflict between served packages is not papered over
        "  cause: Because foo==1 depends on bar>=2 and baz==3 depends on bar<2, we can "
        "conclude that foo==1 and baz==3 are incompatible.",
        # nor a fixed requirement (torch, the test stack) that is not served
        _no_version("torch==9.9.9"),
        "error: Failed to fetch: `https://pypi.org/simple/regex/` (network unreachable)",
    ],
)
def test_other_failures_raise(error):
    def install(requirements: list[str]) -> str | None:
        return error

    with pytest.raises(RuntimeError, match="not for an unserved requirement"):
        make_env.install_available(install, ["torch==9.9.9"], ["regex", "foo==1", "baz==3"])
