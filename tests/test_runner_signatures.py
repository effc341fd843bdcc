"""The V2 names `model_runner_v2_rows` reads, and the 0.34 cache switch, bound against the
installed vLLM (no engine: a CUDA wheel imports here without a GPU, so `nox -s nightly` and
`nox -s signatures` run these against vLLM 0.33/0.34 and nightlies too)."""

from __future__ import annotations

import inspect

import pytest

pytest.importorskip("vllm")

from spec_compat.patches import _model_runner as runners
from spec_compat.patches import cache_config_extensible_kv_cache


def test_the_v2_names_the_row_patch_reads_are_installed():
    if not runners.has_v2():
        pytest.skip("this vLLM has no Model Runner V2")
    served, seen = runners.v2_rows_served()
    assert served, seen
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    params = list(inspect.signature(GPUModelRunner.prepare_inputs).parameters)
    assert params[:2] == ["self", "scheduler_output"]


def test_a_vllm_without_v1_is_served_by_v2():
    if runners.has_v1():
        pytest.skip("this vLLM still has Model Runner V1")
    assert runners.workers_runner()[0] == "V2"
    assert runners.v2_rows_served()[0]


def test_the_extensible_kv_cache_is_off_for_the_stock_engine():
    from vllm.config import CacheConfig

    if "enable_extensible_kv_cache" not in inspect.signature(CacheConfig).parameters:
        pytest.skip("this vLLM has no extensible KV cache")
    assert CacheConfig().enable_extensible_kv_cache is None  # resolved on for CUDA/ROCm
    patched = cache_config_extensible_kv_cache.wrap(CacheConfig)
    assert patched().enable_extensible_kv_cache is False
    assert patched(enable_extensible_kv_cache=True).enable_extensible_kv_cache is True
