#!/usr/bin/env bash
# The GPU proofs, one command, on any CUDA machine with the vLLM to prove installed:
#   python -m venv .venv && . .venv/bin/activate && pip install vllm==0.32.0 -e .
#   bash benchmarks/gpu/run.sh release     # run_release.py: the stock extractor of each line
#                                          # against transformers and vLLM's own states
#   bash benchmarks/gpu/run.sh benchmark   # run_h200.py: B/A, B/N and files (MODEL=moe|mla)
# Results go to $OUT (default gpu-out/).  Each speculators line is installed beside vLLM, not
# into it (both pin older vLLMs): --no-deps into $SPEC_COMPAT_LINES_DIR (default .gpulines/),
# with what the stock extractors import at run time.  A machine without a package registry
# uses the staged kit instead: run_release.sh (stage_vllm.sh) or run_h200.sh (build_kit.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 - <<'PY'
import torch, vllm
assert torch.cuda.is_available(), "no CUDA device: the GPU proofs need one"
print("vllm", vllm.__version__, "torch", torch.__version__, torch.cuda.get_device_name())
PY
if ! python3 -c 'import spec_compat.startup as s, sys; sys.exit(s.hook_file() is None)'; then
  python3 -m pip install -q --no-deps -e .   # the start-up hook reaches spawned workers
fi
export SPEC_COMPAT_LINES_DIR=${SPEC_COMPAT_LINES_DIR:-$PWD/.gpulines}
python3 -m pip install -q loguru pydantic-settings typer rich safetensors "datasets>=4.0,<=4.6"
for line in $(echo "${LINES:-0.3.0,0.4.0.1}" | tr , ' '); do
  [ -d "$SPEC_COMPAT_LINES_DIR/speculators-$line/speculators" ] ||
    python3 -m pip install -q --no-deps --target "$SPEC_COMPAT_LINES_DIR/speculators-$line" \
      "speculators==$line"
done
export KIT=${KIT:-$PWD/.gpulines/no-kit} OUT=${OUT:-$PWD/gpu-out}
export VLLM_WORKER_MULTIPROC_METHOD=spawn TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
case "${1:-release}" in
  release) exec python3 benchmarks/gpu/run_release.py ;;
  benchmark)
    PYTHONPATH="$PWD/src:$SPEC_COMPAT_LINES_DIR/speculators-0.4.0.1" \
      exec python3 benchmarks/gpu/run_h200.py ;;
  *) echo "usage: run.sh release|benchmark" >&2; exit 2 ;;
esac
