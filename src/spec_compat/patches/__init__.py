"""The patch set, one module per patch, in the order they are applied.

Patches on the same target stack: a later one wraps the earlier one's replacement.
"""

from __future__ import annotations

from ..registry import Patch
from . import (
    cache_config_prefix_caching,
    capture_model_check,
    config_device_name_without_gpu,
    cpu_attention_block_size,
    cpu_mem_get_info,
    cpu_torch_mem_get_info,
    cpu_worker_cores,
    driver_copy_threads,
    executor_kv_cache_layout,
    executor_rpc_in_step,
    executor_sample_tokens,
    generate_checks,
    generate_recovery,
    generator_quiet_exit,
    kv_cache_config_specs,
    kv_cache_planning_module,
    model_runner_v1,
    request_block_hashes_off,
    request_eos_token_id,
    scheduler_block_size,
    scheduler_config_initvars,
    shm_transport_driver,
    shm_transport_worker,
    speculators_models_optional,
    speculators_pydantic_torch,
    tensor_parallel_size_check,
    tokenizer_trust_remote_code,
    v030_capture_guard,
    v030_collective_rpc_reply,
    v030_whole_prompt_prefill,
    v04_batches_of_max_num_seqs,
    v04_results_in_input_order,
    worker_eagle3_capture,
    worker_embed_input_ids,
)

ALL: tuple[Patch, ...] = (
    speculators_pydantic_torch.PATCH,
    speculators_models_optional.PATCH,
    tokenizer_trust_remote_code.PATCH,
    config_device_name_without_gpu.PATCH,
    cache_config_prefix_caching.PATCH,
    cpu_attention_block_size.PATCH,
    scheduler_config_initvars.PATCH,
    v030_whole_prompt_prefill.PATCH,
    kv_cache_config_specs.PATCH,
    scheduler_block_size.PATCH,
    request_eos_token_id.PATCH,
    request_block_hashes_off.PATCH,
    shm_transport_driver.PATCH,
    executor_sample_tokens.PATCH,
    executor_kv_cache_layout.PATCH,
    model_runner_v1.PATCH,
    v030_collective_rpc_reply.PATCH,
    v030_capture_guard.PATCH,
    executor_rpc_in_step.PATCH,
    cpu_torch_mem_get_info.PATCH,
    cpu_mem_get_info.PATCH,
    cpu_worker_cores.PATCH,
    v04_results_in_input_order.PATCH,
    v04_batches_of_max_num_seqs.PATCH,
    generate_checks.PATCH,
    generate_recovery.PATCH,
    generator_quiet_exit.PATCH,
    capture_model_check.PATCH,
    tensor_parallel_size_check.PATCH,
    driver_copy_threads.PATCH,
    worker_embed_input_ids.PATCH,
    worker_eagle3_capture.PATCH,
    shm_transport_worker.PATCH,
)

#: Import-time patches: applied while a stock module is compiled (see requirements_gate).
IMPORT_PATCHES = (kv_cache_planning_module.IMPORT_PATCH,)

#: Former patch names, still accepted by apply(only=..., exclude=...) with a warning.
RENAMED = {
    "worker_native_layer_call": "worker_eagle3_capture",
    "worker_language_model": "worker_eagle3_capture",
}
