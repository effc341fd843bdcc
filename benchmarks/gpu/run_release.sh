#!/usr/bin/env bash
# On the device machine, in the repo root, with the kit of benchmarks/gpu/stage_vllm.sh:
#   bash benchmarks/gpu/run_release.sh stage   # carry one .gpukit-*/part-*: kept in /tmp/stage
#   bash benchmarks/gpu/run_release.sh run     # carry the last part: unpack, then the proof
# Calls follow each other on a warm machine (its 30 s idle window): /tmp survives between them.
# `run` prints what it loads (torch, its CUDA libraries, vLLM) before anything runs, and
# writes $OUT/release.json (benchmarks/gpu/run_release.py) and the image's package list.
set -euo pipefail
mkdir -p /tmp/stage
for part in .gpukit-*/part-*; do [ -f "$part" ] && cp "$part" /tmp/stage/; done
# vLLM's own binaries the kit leaves out (its MoE kernels, 45 MiB: a call of their own),
# carried as .gpukit-vllm/ and put beside vLLM after the install
mkdir -p /tmp/stage-vllm
for lib in .gpukit-vllm/*; do [ -f "$lib" ] && cp "$lib" /tmp/stage-vllm/; done
ls -la /tmp/stage
if [ "${1:?stage|run}" = stage ]; then exit 0; fi

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export VLLM_WORKER_MULTIPROC_METHOD=spawn
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip list --format=freeze > "$OUT/image_packages.txt" 2>/dev/null || true
# (re)installed when the staged parts changed: a warm machine's later call can add parts, e.g.
# a CUDA library the image's copy does not satisfy (stage_vllm.sh EXTRA)
if [ "$(ls /tmp/stage)" != "$(cat /tmp/kit/.parts 2>/dev/null)" ]; then
  rm -rf /tmp/kit && mkdir -p /tmp/kit/wheels
  cat /tmp/stage/part-* | tar -C /tmp/kit/wheels -xif -
  PIP=(python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir)
  # torch (the big one) beside the rest, with the CUDA libraries carried for it, where its
  # RPATH ($ORIGIN/../../nvidia/...) looks first; both go before the image's packages
  if ls /tmp/kit/wheels/torch/*.whl >/dev/null 2>&1; then
    "${PIP[@]}" --target /tmp/kit/torchsite /tmp/kit/wheels/torch/*.whl &
    # the image's torchvision/torchaudio are built for its own torch, and transformers
    # imports torchvision when it finds it (`operator torchvision::nms does not exist`)
    python3 -m pip uninstall -q -y torchvision torchaudio || true
  fi
  "${PIP[@]}" --target /tmp/kit/site /tmp/kit/wheels/*.whl
  tar -C /tmp/kit/site -xf /tmp/kit/wheels/speculators.tar
  wait
  ls /tmp/stage > /tmp/kit/.parts
fi
cp /tmp/stage-vllm/* /tmp/kit/site/vllm/ 2>/dev/null || true
# wheels the kit leaves out (flashinfer and its needs: vLLM's Gated DeltaNet prefill on
# Hopper), carried as .gpukit-wheels/ with the last part
if ls .gpukit-wheels/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/kit/site .gpukit-wheels/*.whl
fi
# the kit's packages before the image's (its torch, transformers, ...); spec_compat from this
# checkout, with its start-up hook in the interpreter's site-packages (spawned workers)
export PYTHONPATH="$PWD/src:/tmp/kit/site:/tmp/kit/torchsite"
cp src/spec_compat_startup.pth "$(python3 -c 'import site; print(site.getsitepackages()[0])')/"
python3 - <<'PY' 2>&1 | tee "$OUT/loaded.txt"
import re, torch
print("torch", torch.__version__, torch.__file__, "cuda", torch.version.cuda,
      "device", torch.cuda.get_device_name(), "nccl", torch.cuda.nccl.version())
# (not torch.backends.cudnn.version(): torch 2.14 refuses the image's cuDNN 9.19 when asked,
# and nothing here asks: dense attention runs in FlashAttention, the oracle on the CPU)
x = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
print("matmul ok", float((x @ x).float().abs().sum()) > 0)
libs = sorted({m.group(0) for m in re.finditer(r"/\S+\.so[.\d]*", open("/proc/self/maps").read())
               if re.search(r"cublas|cudnn|nccl|nvjitlink|cudart|cusparse|nvrtc|torch_cuda", m.group(0))})
print("\n".join(libs))
import transformers, triton, vllm
print("vllm", vllm.__version__, vllm.__file__, "transformers", transformers.__version__,
      "triton", triton.__version__)
PY
python3 benchmarks/gpu/run_release.py
