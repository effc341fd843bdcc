#!/usr/bin/env bash
# On the device machine, in the repo root, after stage 1 copied .gpukit/kit.tar.xz.part-aa
# to /tmp/stage: reassemble, unpack, register spec_compat's vLLM plugin, run the experiment.
set -euo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
# Spawned workers (what vLLM picks whenever the parent has touched CUDA); spec_compat's
# worker patches reach them through the vllm.general_plugins entry point registered below.
export VLLM_WORKER_MULTIPROC_METHOD=spawn
cat /tmp/stage/kit.tar.xz.part-aa .gpukit/kit.tar.xz.part-ab | xz -d -T8 | tar -C /tmp -xf -
# spec_compat from this checkout, with the dist-info that makes vLLM load its plugin in
# every (spawned) worker.
DI=/tmp/site/spec_compat-0.1.0.dist-info
mkdir -p "$DI"
printf 'Metadata-Version: 2.1\nName: spec-compat\nVersion: 0.1.0\n' > "$DI/METADATA"
printf '[vllm.general_plugins]\nspec_compat = spec_compat.plugin:load\n' > "$DI/entry_points.txt"
export PYTHONPATH="$PWD/src:/tmp/site"
python3 -c 'import torch, vllm; print("torch", torch.__version__, "vllm", vllm.__version__, torch.cuda.get_device_name())'
python3 benchmarks/gpu/run_h200.py
