#!/usr/bin/env bash
# Build the carry kit for real CUDA vLLM 0.24.0 on the lent H200 (shared/docs/gpu-h200-recipe.md),
# scripted end to end: download, strip, add the cp312 wheels the GPU image lacks, pack, split.
#   bash benchmarks/gpu/build_kit.sh  -> .gpukit/kit.tar.xz.part-{aa,ab}, moe.so.xz (git-ignored)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=$ROOT/.gpukit
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
grep -qx '/.gpukit/' .git/info/exclude 2>/dev/null || echo '/.gpukit/' >> .git/info/exclude

PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64
      --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64
      --platform manylinux1_x86_64 --platform any)

# 1. vLLM itself, unpacked, without what a dense model on Hopper never loads.
python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$WORK/dl" vllm==0.24.0
mkdir -p "$WORK/site"
unzip -q "$WORK"/dl/vllm-0.24.0-*.whl -d "$WORK/site"
# vLLM's MoE kernels travel apart (.gpukit/moe.so.xz, 39 MB: a third staging call), only
# for MODEL=moe
xz -9 -T2 -c "$WORK"/site/vllm/_moe_C_stable_libtorch.abi3.so > "$OUT/moe.so.xz"
rm -f "$WORK/site/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so" "$WORK"/site/vllm/_moe_C_stable_libtorch*.so
rm -rf "$WORK/site/vllm/third_party/deep_gemm" "$WORK/site/vllm/third_party/fmha_sm100"
find "$WORK/site" -name 'vllm-rs' -type f -delete
find "$WORK/site" -name '__pycache__' -type d -prune -exec rm -rf {} +

# 2. The cp312 wheels the GPU image lacks, at the versions pip resolves for vllm==0.24.0.
NEEDED="pydantic pydantic-core annotated-types typing-inspection msgspec pyzmq cbor2 blake3
pybase64 openai-harmony openai httpx2 sniffio jiter distro cachetools llguidance xgrammar
apache-tvm-ffi fastapi starlette partial-json-parser loguru pydantic-settings python-dotenv
typing-extensions gguf diskcache lark"
python3 -m pip install -q --dry-run --ignore-installed --no-deps "${PLAT[@]}" \
  --target "$WORK/resolve" --report "$WORK/report.json" vllm==0.24.0 >/dev/null 2>&1 || true
python3 - "$WORK" $NEEDED <<'PY'
import json, subprocess, sys
work, names = sys.argv[1], sys.argv[2:]
# Resolve vllm's own pins for these names from its metadata (one level deep).
import zipfile, glob, email.parser
from packaging.requirements import Requirement
whl = glob.glob(f"{work}/dl/vllm-0.24.0-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    meta = email.parser.Parser().parsestr(z.read(next(n for n in z.namelist() if n.endswith("METADATA"))).decode())
pins = {}
for line in meta.get_all("Requires-Dist") or []:
    r = Requirement(line)
    if r.marker is None or r.marker.evaluate({"python_version": "3.12", "platform_machine": "x86_64", "sys_platform": "linux", "platform_system": "Linux", "extra": ""}):
        pins[r.name.lower().replace("_", "-")] = str(r.specifier)
specs = [f"{n}{pins.get(n, '')}" for n in names]
open(f"{work}/specs.txt", "w").write("\n".join(specs) + "\n")
print(" ".join(specs))
PY
python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$WORK/wheels" -r "$WORK/specs.txt"
# vLLM 0.24 pins apache-tvm-ffi==0.1.9 but only bounds xgrammar; the newest xgrammar whose
# own requirement admits tvm-ffi 0.1.9 is 0.2.5.post1 (0.2.6+ need >=0.1.10): pip's answer.
rm -f "$WORK"/wheels/xgrammar-*.whl
python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$WORK/wheels" xgrammar==0.2.5.post1
ls "$WORK"/wheels | grep -i -E "tvm|xgrammar"
python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$WORK/wheels" speculators==0.4.0.1
python3 -m pip install -q --no-deps --no-compile "${PLAT[@]}" --target "$WORK/site" "$WORK"/wheels/*.whl
# xgrammar's static library is for building against it; its bindings carry debug info.
find "$WORK/site/xgrammar" -name '*.a' -delete 2>/dev/null || true
find "$WORK/site" -name '*.so' -path '*xgrammar*' -exec strip --strip-debug {} + 2>/dev/null || true
find "$WORK/site" -name '__pycache__' -type d -prune -exec rm -rf {} +
du -sh "$WORK/site"

# 3. Pack and split so each chunk travels in one device call (64 MiB carry limit).
rm -f "$OUT"/kit.tar.xz.part-*
tar -C "$WORK" -cf - site | xz -9 -T2 | split -b 60MiB - "$OUT/kit.tar.xz.part-"
ls -la "$OUT"
