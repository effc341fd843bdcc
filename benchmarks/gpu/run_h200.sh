#!/usr/bin/env bash
# On the device machine, in the repo root, after stage 1 copied .gpukit/kit.tar.xz.part-aa
# (and, for MODEL=moe, .gpukit/moe.so.xz) to /tmp/stage: reassemble, unpack, install
# spec_compat's start-up hook, run the experiment.
set -euo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
# Spawned workers (what vLLM picks whenever the parent has touched CUDA); spec_compat's
# worker patches reach them through the start-up hook installed below.
export VLLM_WORKER_MULTIPROC_METHOD=spawn
# A later call on the same (warm) machine finds the kit unpacked already.
[ -d /tmp/site/vllm ] || cat /tmp/stage/kit.tar.xz.part-aa .gpukit/kit.tar.xz.part-ab | xz -d -T8 | tar -C /tmp -xf -
# MODEL=moe needs vLLM's MoE kernels, which the kit leaves out (a third staged file)
if [ -f /tmp/stage/moe.so.xz ] && [ ! -f /tmp/site/vllm/_moe_C_stable_libtorch.abi3.so ]; then
  xz -d -c /tmp/stage/moe.so.xz > /tmp/site/vllm/_moe_C_stable_libtorch.abi3.so
fi
# spec_compat from this checkout, with its process start-up hook (the .pth the wheel puts
# in site-packages) in the interpreter's site-packages (the image's python is a venv: no
# user site): every (spawned) worker is patched from its first line.
export PYTHONPATH="$PWD/src:/tmp/site"
cp src/spec_compat_startup.pth "$(python3 -c 'import site; print(site.getsitepackages()[0])')/"
SPEC_COMPAT_PATCHES=executor_rpc_in_step python3 -c \
  'import spec_compat.startup as s; assert s.ACTIVE, "start-up hook inactive"; print("start-up hook: active")'
python3 -c 'import torch, vllm; print("torch", torch.__version__, "vllm", vllm.__version__, torch.cuda.get_device_name())'
python3 benchmarks/gpu/run_h200.py
