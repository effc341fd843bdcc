#!/usr/bin/env bash
# Build the carry kit for one CUDA vLLM release on the lent H200, whose image has torch 2.11
# (shared/docs/gpu-h200-recipe.md):
#   EXTRA=nvidia-nccl-cu13==2.30.7 bash benchmarks/gpu/stage_vllm.sh 0.34.0
#     -> .gpukit-0.34.0/part-aa, part-ab, ... (<= 60 MiB each: one device call each)
# The kit is wheels as PyPI serves them (already deflated: xz on top saves a quarter and
# costs tens of minutes on a busy 2-core machine) in one tar, split: vLLM's less what a
# dense model on Hopper never loads, the torch it pins when that is not the image's (less
# its headers), the cp312 wheels of its other requirements that the image lacks or holds at
# an older version (benchmarks/gpu/image_packages.txt), and both speculators lines.  The
# image's CUDA libraries, triton included, are tried first; EXTRA carries some anyway, beside
# torch.  vLLM 0.34.0 (torch 2.14.0) on the 2026-12 image needs exactly NCCL 2.30.7:
# libtorch_cuda links NCCL 2.30 functions the image's 2.28.9 lacks; its cuBLAS 13.1.0,
# cuDNN 9.19 (refused only when asked: a dense Llama does not) and nvJitLink 13.0 do.
# Then, on a warm machine (30 s idle window), one call per part:
#   bash benchmarks/gpu/run_release.sh stage   (carry that part)
#   bash benchmarks/gpu/run_release.sh run     (carry the last part): installs, then runs
set -euo pipefail
VERSION=${1:?usage: stage_vllm.sh VLLM_VERSION}
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=$ROOT/.gpukit-$VERSION
WORK=${STAGE_WORK:-$(mktemp -d)}
[ -n "${STAGE_WORK:-}" ] || trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT" "$WORK"
grep -qxF '/.gpukit-*/' .git/info/exclude 2>/dev/null || echo '/.gpukit-*/' >> .git/info/exclude
NICE=(nice -n 10)

PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux_2_18_x86_64 --platform manylinux2014_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_25_x86_64 --platform manylinux_2_31_x86_64
      --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64
      --platform manylinux1_x86_64 --platform any)
# GPU kernel libraries that a dense Llama in eager mode never imports (vLLM guards them), and
# the torch family, which comes apart (below): left out of the resolution.
SKIP=${SKIP:-"torch torchvision torchaudio torchcodec triton flashinfer-python tilelang
nvidia-cutlass-dsl quack-kernels tokenspeed-mla humming-kernels pynvvideocodec
fastsafetensors instanttensor nvidia-cudnn-frontend"}

# 1. vLLM's wheel, less FA2 (Hopper uses FA3), the Rust front end, DeepGEMM, the SM100
#    attention and the MoE kernels (a dense model does not load them; all imported guarded):
#    `zip -d` drops members without recompressing the rest.
[ -f "$WORK"/dl/vllm-"$VERSION"-*.whl ] 2>/dev/null ||
  python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$WORK/dl" "vllm==$VERSION"
WHEEL=$(ls "$WORK"/dl/vllm-"$VERSION"-*.whl)
rm -rf "$WORK/kit" && mkdir -p "$WORK/kit"
cp "$WHEEL" "$WORK/kit/"
zip -q -d "$WORK/kit/$(basename "$WHEEL")" 'vllm/vllm_flash_attn/_vllm_fa2_C*' 'vllm/_moe_C*' \
  'vllm/third_party/deep_gemm/*' 'vllm/third_party/fmha_sm100/*' 'vllm/vllm-rs'

# 2. The requirements, as pip resolves them for the image's Python.
python3 - "$WHEEL" "$WORK/reqs.txt" "$WORK/torch.txt" $SKIP <<'PY'
import email.parser, sys, zipfile
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
wheel, out, torch_out, skip = sys.argv[1], sys.argv[2], sys.argv[3], set(sys.argv[4:])
with zipfile.ZipFile(wheel) as z:
    meta = email.parser.Parser().parsestr(
        z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode())
env = {"python_version": "3.12", "platform_machine": "x86_64", "sys_platform": "linux",
       "platform_system": "Linux", "extra": ""}
keep, torch = [], ""
for line in meta.get_all("Requires-Dist") or []:
    r = Requirement(line)
    if r.marker and not r.marker.evaluate(env):
        continue
    if canonicalize_name(r.name) == "torch":
        torch = str(r.specifier).removeprefix("==")
    if canonicalize_name(r.name) not in skip:
        r.marker = None
        keep.append(str(r))
open(out, "w").write("\n".join(keep) + "\nloguru\npydantic-settings\n")
open(torch_out, "w").write(torch + "\n")
PY
TORCH=$(cat "$WORK/torch.txt")
# (minutes: pip fetches metadata one by one; a kept STAGE_WORK folder reuses its answer)
[ -n "${STAGE_WORK:-}" ] && [ -s "$WORK/report.json" ] ||
  "${NICE[@]}" python3 -m pip install -q --dry-run --ignore-installed "${PLAT[@]}" \
    --target "$WORK/resolve" --report "$WORK/report.json" -r "$WORK/reqs.txt" "torch==$TORCH"
# Carry what the image lacks or holds at an older version (unknown versions: the image's),
# except SKIP and the CUDA libraries (nvidia-*, cuda-*), which some requirements pull in
# through torch: the image's are tried first (EXTRA names some to carry anyway).
python3 - "$WORK/report.json" benchmarks/gpu/image_packages.txt "$WORK/specs.txt" $SKIP <<'PY'
import json, sys
from packaging.utils import canonicalize_name
from packaging.version import Version
report, image_file, out, *skip = sys.argv[1:]
image = {}
for line in open(image_file):
    line = line.split("#")[0].strip()
    if line:
        name, _, version = line.partition("==")
        image[canonicalize_name(name)] = version or None
specs, reused = [], []
for item in json.load(open(report))["install"]:
    name, version = canonicalize_name(item["metadata"]["name"]), item["metadata"]["version"]
    if name in skip or name.startswith(("nvidia-", "cuda-")):
        continue
    # an image version at least the resolved one is kept: newer is taken to be compatible
    # (its numpy 2.5 against the 2.3 numba's pin resolves: the image's compiled packages
    # are built against its own), older may lack what vLLM needs (hub 1.x, transformers)
    if name in image and (image[name] is None or Version(image[name]) >= Version(version)):
        reused.append(name)
    else:
        specs.append(f"{name}=={version}")
open(out, "w").write("\n".join(specs) + "\n")
print("carried:", " ".join(specs))
print("the image's:", " ".join(reused))
PY
"${NICE[@]}" python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$WORK/wheels" -r "$WORK/specs.txt"
# (a kept STAGE_WORK may hold other versions from an earlier run: only the ones named)
python3 - "$WORK/specs.txt" "$WORK/wheels" "$WORK/kit" <<'PY'
import shutil, sys
from pathlib import Path
from packaging.utils import canonicalize_name, parse_wheel_filename
specs, wheels, kit = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
wanted = {tuple(line.strip().split("==")) for line in open(specs) if "==" in line}
wanted = {(canonicalize_name(n), v) for n, v in wanted}
for wheel in wheels.glob("*.whl"):
    name, version, *_ = parse_wheel_filename(wheel.name)
    if (name, str(version)) in wanted:
        shutil.copy(wheel, kit)
PY
tar -C .venvs -cf "$WORK/kit/speculators.tar" --exclude bin speculators-0.3.0 speculators-0.4.0.1

# 3. The torch vLLM pins, when the image's is another, less headers, tools and test data.
if [ "$TORCH" != "$(grep -E '^torch==' benchmarks/gpu/image_packages.txt | cut -d= -f3)" ]; then
  [ -f "$WORK"/dl/torch-"$TORCH"-*.whl ] 2>/dev/null ||
    python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$WORK/dl" "torch==$TORCH"
  mkdir -p "$WORK/kit/torch" && cp "$WORK"/dl/torch-"$TORCH"-*.whl "$WORK/kit/torch/"
  zip -q -d "$WORK"/kit/torch/torch-*.whl 'torch/include/*' 'torch/bin/protoc*' \
    'torch/testing/_internal/generated/*'
fi
# CUDA libraries the image's copies do not satisfy, beside torch (its RPATH looks there first)
if [ -n "${EXTRA:-}" ]; then
  mkdir -p "$WORK/kit/torch"
  python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$WORK/kit/torch" $EXTRA
fi
du -sh "$WORK/kit"

# 4. One tar, split: one device call a part (`run_release.sh` joins and installs them).
rm -f "$OUT"/part-*
tar -C "$WORK/kit" -cf - . | split -b 60MiB - "$OUT/part-"
ls -la "$OUT"
