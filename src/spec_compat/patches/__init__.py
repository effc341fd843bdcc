"""The patch set: one module per patch, each declaring `PATCH`, listed once.

`ORDER` is the listing order: `status()` and doctor list the patches in it.  It does not
order a stack: patches that wrap one target declare where they stand relative to each other
(`after=` / `before=` on the declaration), and the registry applies each stack in the order
those give (`spec_compat.engine.stacks`); between patches with nothing declared, which are
independent, this order decides.  A test checks that every module here is listed.

`LISTING` (`_listing.py`, written by tools/patches_doc.py from the declarations) is what
`apply()` needs of each patch without importing its module.  The registry loads every
module once a module they target is imported, and refuses a listing that no longer matches
its declaration.

Patch modules import the engine, the transport and the model checks
(`spec_compat.models`), never `spec_compat.api` or anything above it.
"""

from __future__ import annotations

import importlib

from spec_compat.engine.patch import ImportPatch, Patch
from spec_compat.patches._listing import LISTING  # noqa: F401  (generated from the declarations)

ORDER = (
    "speculators_pydantic_torch",
    "speculators_models_optional",
    "tokenizer_trust_remote_code",
    "config_decoder_layers",
    "replica_dataset_range",
    "config_device_name_without_gpu",
    "kv_cache_planning_module",
    # CacheConfig, SchedulerConfig and the KV/scheduler constructors
    "cache_config_prefix_caching",
    "cache_config_extensible_kv_cache",
    "cpu_attention_block_size",
    "scheduler_config_initvars",
    "engine_batch_defaults",
    "v030_whole_prompt_prefill",
    "kv_cache_config_specs",
    "kv_cache_hybrid_unify",
    "kv_cache_hybrid_groups",
    "kv_cache_hybrid_plan",
    "scheduler_block_size",
    "scheduler_kv_cache_view",
    "scheduler_finished_requests_kept",
    "scheduler_rebuild",
    "request_eos_token_id",
    "request_block_hashes_off",
    # MultiprocExecutor
    "shm_transport_driver",
    "executor_sample_tokens",
    "executor_kv_cache_layout",
    "model_runner_v1",
    "v030_collective_rpc_reply",
    "v030_capture_guard",
    "executor_pipelined_steps",
    "executor_rpc_in_step",
    "cpu_torch_mem_get_info",
    "cpu_mem_get_info",
    "cpu_worker_cores",
    # VllmHiddenStatesGenerator.generate
    "v04_results_in_input_order",
    "v04_batches_of_max_num_seqs",
    "generate_checks",
    "generate_recovery",
    "generator_quiet_exit",
    "capture_model_check",
    "tensor_parallel_size_check",
    "driver_copy_threads",
    # the worker
    "worker_embed_input_ids",
    "worker_eagle3_capture",
    "worker_kernel_check",
    "model_runner_v2_rows",
    "shm_transport_worker",
)


def load() -> tuple[Patch | ImportPatch, ...]:
    """Every declaration, in `ORDER`: imports each patch module (what `apply()` avoids: it
    reads `LISTING`)."""
    return tuple(importlib.import_module(f"{__name__}.{name}").PATCH for name in ORDER)


def __getattr__(name: str) -> tuple[Patch | ImportPatch, ...]:
    if name == "ALL":  # every declaration, loaded on first use
        return load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Former patch names, still accepted by apply(only=..., exclude=...) with a warning.
RENAMED = {
    "worker_native_layer_call": "worker_eagle3_capture",
    "worker_language_model": "worker_eagle3_capture",
}
