"""Fused attention timed per pass from the measured kernel tables
(core.parallel.timing.attention_time)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainbudget.core.ops import SCALAR, numpy_ops
from trainbudget.core.parallel.layout import PlanNumbers
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.timing.attention_time import AttentionKernel, measured_rates
from trainbudget.core.parallel.timing.efficiency import DEFAULT_EFFICIENCY
from trainbudget.core.parallel.timing.layer_time import KernelModel, layer_compute
from trainbudget.core.spec.attention_kernels import attention_tflops_per_second
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.presets import get_preset

H100 = get_hardware("h100-sxm")
LLAMA = get_preset("llama-3-8b")  # head dim 128
FLASH3_H100 = AttentionKernel("flash3", "h100-sxm", H100.peak_flops_per_second("bf16"), 1.0)


def _kernel(gpu: str = "h100-sxm", kernel: str = "flash3") -> AttentionKernel:
    hw = get_hardware(gpu)
    return AttentionKernel(kernel, gpu, hw.peak_flops_per_second("bf16"), 1.0)


def test_a100_runs_both_passes_at_its_forward_backward_rate():
    """Dao 2023 charts A100 forward+backward only (Fig. 4): both passes take that rate."""
    fb = attention_tflops_per_second(
        "flash2", "a100-80gb", head_dim=128, causal=True, pass_="forward_backward", seq_len=4096
    )
    assert measured_rates("flash2", "a100-80gb", 128, True, 4096) == (fb * 1e12, fb * 1e12)


def test_h100_causal_backward_takes_the_forward_causal_ratio():
    def tf(causal, pass_):
        return attention_tflops_per_second(
            "flash3", "h100-sxm", head_dim=128, causal=causal, pass_=pass_, seq_len=2048
        )

    assert tf(True, "backward") is None  # Shah et al. 2024 chart the backward unmasked only
    forward, backward = measured_rates("flash3", "h100-sxm", 128, True, 2048)
    assert forward == tf(True, "forward") * 1e12
    assert backward == pytest.approx(
        tf(False, "backward") * tf(True, "forward") / tf(False, "forward") * 1e12, rel=1e-12
    )


def test_same_die_gpus_borrow_the_curves_scaled_by_their_peaks():
    h100, h200, pcie = _kernel(), _kernel("h200"), _kernel("h100-pcie")
    at = (128, True, 8192, SCALAR)
    assert h200.pass_seconds_per_flop(*at) == h100.pass_seconds_per_flop(*at)
    ratio = H100.peak_flops_per_second("bf16") / get_hardware("h100-pcie").peak_flops_per_second(
        "bf16"
    )
    slow_fast = zip(pcie.pass_seconds_per_flop(*at), h100.pass_seconds_per_flop(*at), strict=True)
    for slow, fast in slow_fast:
        assert slow == pytest.approx(fast * ratio, rel=1e-12)


@pytest.mark.parametrize("gpu", ["b200", "mi300x"])
def test_a_gpu_without_curves_keeps_the_fraction_of_its_peak(gpu):
    assert measured_rates("flash2", gpu, 128, True, 4096) is None
    assert _kernel(gpu, "flash2").pass_seconds_per_flop(128, True, 4096, SCALAR) is None


def test_a_machine_outside_the_catalog_has_no_curve():
    assert measured_rates("flash2", "my-bench-box", 128, True, 4096) is None


def test_the_grid_takes_each_distinct_length_once():
    import numpy as np

    k = _kernel()
    grid = k.pass_seconds_per_flop(128, True, np.array([8192, 4096, 8192]), numpy_ops())
    for i, seq in enumerate((8192, 4096, 8192)):
        one = k.pass_seconds_per_flop(128, True, seq, SCALAR)
        assert (grid[0][i], grid[1][i]) == one


def _layer(seq_len, causal, attention=FLASH3_H100, eff=DEFAULT_EFFICIENCY, cp=1):
    return layer_compute(
        LLAMA,
        PlanNumbers.of(Plan(dp=1, cp=cp)),
        seq_len=seq_len,
        e=2,
        peak=H100.peak_flops_per_second("bf16"),
        hbm=H100.hbm_bytes_per_second,
        eff=eff.resolved(H100, "flash3"),
        causal=causal,
        kernels=KernelModel(attention=attention),
    )


@pytest.mark.parametrize("seq_len, low, high", [(2048, 0.58, 0.62), (16384, 0.51, 0.54)])
def test_causal_attention_is_not_half_the_time(seq_len, low, high):
    """FlashAttention-3 on H100, head dim 128 (Shah et al. 2024, Fig. 5): causal forward takes
    0.60 of the unmasked time at 2k and 0.53 at 16k, not the ideal 0.5."""
    causal, full = _layer(seq_len, True), _layer(seq_len, False)
    assert low < causal.attention_seconds / full.attention_seconds < high


def test_the_backward_runs_slower_than_its_flops_say():
    """The papers count the backward as 2.5 forwards; measured on H100 it takes ~2.9 at 8k
    (Shah et al. 2024, Fig. 5 and 6: 646 vs 559 TFLOP/s unmasked, head dim 128)."""
    layer = _layer(8192, False)
    ratio = layer.attention_backward_seconds / layer.attention_seconds
    assert ratio == pytest.approx(2.5 * 646 / 559, rel=1e-9)


def test_context_parallelism_reads_the_rate_of_its_shorter_chunks():
    """Each CP rank's kernel runs s / cp queries: the rate at 4k for 16k over cp 4."""
    cp4 = _layer(16384, False, cp=4)
    at4k = _layer(4096, False)
    # a quarter of the queries against all the keys: the FLOPs of 4k x 16k, at 4k's rate
    assert cp4.attention_seconds == pytest.approx(4 * at4k.attention_seconds, rel=1e-9)


def test_a_given_attention_fraction_times_the_kernel_instead():
    """A calibration's measured fraction (Efficiency.attention) replaces the tables."""
    eff = replace(DEFAULT_EFFICIENCY, attention=0.5)
    without = _layer(4096, False, attention=None, eff=eff)
    flops = 4096 * 4096 * 2 * (LLAMA.d_q + LLAMA.d_attn_out)
    assert without.attention_seconds == pytest.approx(
        flops / (0.5 * H100.peak_flops_per_second("bf16")), rel=1e-12
    )
    assert without.attention_backward_seconds == pytest.approx(
        2.5 * without.attention_seconds, rel=1e-12
    )


def _paper_seconds(kernel, causal, pass_, q, k, heads=1, head_dim=128):
    """Seconds of one block of q queries x k keys, counted as the papers count FLOPs
    (4 q k d per head forward, halved under the mask, x 2.5 backward), at the table's rate for
    a square kernel of the block's query length."""
    rate = attention_tflops_per_second(
        kernel, "h100-sxm", head_dim=head_dim, causal=causal, pass_=pass_, seq_len=q
    )
    flops = 4 * q * k * head_dim * heads * (0.5 if causal else 1.0)
    return flops * (2.5 if pass_ == "backward" else 1.0) / (rate * 1e12)


def test_the_context_parallel_ring_runs_one_causal_block_and_unmasked_halves():
    """Transformer Engine's ring under a causal mask, s = 32k over cp 4 (8k queries a rank, as
    two 4k chunks): step 0 is the rank's own causal 8k x 8k block; each of the 3 other steps an
    unmasked block of 8k queries x 4k keys (or 4k x 8k), timed at the non-causal curve of the
    4k chunk. Forward, cuDNN on H100 (Shah et al. 2024, Fig. 5), summed block by block."""
    s, cp, chunk = 32768, 4, 4096
    kernel = _kernel(kernel="cudnn")
    forward, _ = kernel.ring_seconds_per_flop(128, s, cp, SCALAR)
    unmasked_flops = 4 * (s // cp) * s * 128  # the rank's queries x every key, no mask
    blocks = _paper_seconds("cudnn", True, "forward", 2 * chunk, 2 * chunk)
    blocks += (cp - 1) * _paper_seconds("cudnn", False, "forward", chunk, 2 * chunk)
    assert forward * unmasked_flops == pytest.approx(blocks, rel=1e-12)


def test_without_context_parallelism_the_ring_is_the_causal_curve():
    import numpy as np

    k = _kernel(kernel="cudnn")
    assert k.ring_seconds_per_flop(128, 8192, 1, SCALAR) == k.pass_seconds_per_flop(
        128, True, 8192, SCALAR
    )
    cps = np.array([1, 2, 4, 2])
    grid = k.ring_seconds_per_flop(128, 16384, cps, numpy_ops())
    for i, cp in enumerate(cps.tolist()):
        one = k.ring_seconds_per_flop(128, 16384, cp, SCALAR)
        assert grid[0][i] == pytest.approx(one[0], rel=1e-15)
        assert grid[1][i] == pytest.approx(one[1], rel=1e-15)


def test_the_ring_s_unmasked_blocks_run_faster_than_a_causal_kernel_of_their_length():
    """The off-diagonal steps skip no tiles, so from 4k on they beat the causal kernel at the
    rank's length: CP 8 on 64k takes less attention time than the causal curve at 8k says."""
    k = _kernel(kernel="cudnn")
    ring = k.ring_seconds_per_flop(128, 65536, 8, SCALAR)
    causal = k.pass_seconds_per_flop(128, True, 8192, SCALAR)
    assert ring[0] < causal[0] and ring[1] < causal[1]


def test_megatron_times_cudnn_fused_attention_on_hopper():
    """Transformer Engine prefers its FusedAttention (cuDNN) backend on compute capability
    9.0+: the megatron row's kernel, measured apart from FlashAttention-3 (Shah et al. 2024,
    Fig. 5: cuDNN 539 vs FlashAttention-3 616 TFLOP/s causal forward at 16k, head dim 128)."""
    from trainbudget.core.spec.frameworks import get_framework

    assert get_framework("megatron").attention_kernel == "cudnn"
    assert measured_rates("cudnn", "h200", 128, True, 16384)[0] == pytest.approx(539e12)
    assert measured_rates("flash3", "h200", 128, True, 16384)[0] == pytest.approx(616e12)


def test_beyond_the_chart_a_causal_pass_closes_on_the_unmasked_one():
    """Past 16k the causal / unmasked shortfall keeps shrinking by the curve's last factor per
    doubling: FlashAttention-3 d128 forward (Shah et al. 2024, Fig. 5) 602/646 at 8k, 616/648
    at 16k, so at 64k (two doublings) the ratio is 1 - (1 - r16) f^2, f = (1 - r16) / (1 - r8);
    unmasked rates stay flat, and within the chart nothing changes."""
    r8, r16 = 602 / 646, 616 / 648
    f = (1 - r16) / (1 - r8)
    at16 = measured_rates("flash3", "h100-sxm", 128, True, 16384)
    at64 = measured_rates("flash3", "h100-sxm", 128, True, 65536)
    gain = (1 - (1 - r16) * f**2) / r16
    assert at64[0] == pytest.approx(at16[0] * gain, rel=1e-9)
    assert at64[1] == pytest.approx(at16[1] * gain, rel=1e-9)
    assert 1 < gain < 648 / 616  # closer to the unmasked rate, never past it
    full16 = measured_rates("flash3", "h100-sxm", 128, False, 16384)
    assert measured_rates("flash3", "h100-sxm", 128, False, 65536) == full16
    # A100 (forward+backward charted only): the same rule on that chart's ratio
    a16 = measured_rates("flash2", "a100-80gb", 128, True, 16384)
    a32 = measured_rates("flash2", "a100-80gb", 128, True, 32768)
    ra8, ra16 = 182 / 201, 189 / 203  # Dao 2023, Fig. 4, d128 causal / non-causal
    fa = (1 - ra16) / (1 - ra8)
    assert a32[0] == pytest.approx(a16[0] * (1 - (1 - ra16) * fa) / ra16, rel=1e-9)


def test_b200_cudnn_runs_unmasked_at_its_causal_rate_of_twice_the_length():
    """B200's cuDNN table (NVIDIA cudnn-frontend 0b1577c) is causal only: an unmasked pass over
    8k reads the causal rates at 16k, both passes."""
    assert measured_rates("cudnn", "b200", 128, False, 8192) == measured_rates(
        "cudnn", "b200", 128, True, 16384
    )


@pytest.mark.parametrize(("kernel", "ratio"), [("cudnn", 0.898), ("flash3", 0.954)])
def test_the_twice_the_length_rule_reads_unmasked_a_little_slow_where_both_are_charted(
    kernel, ratio
):
    """Shah et al. 2024, Fig. 5, d128 forward on H100: cuDNN causal 16k 539 over unmasked 8k
    600; FlashAttention-3 616 over 646. The rule's reading (causal at 2 s) against the
    measured unmasked rate, where both are charted."""
    causal_twice, _ = measured_rates(kernel, "h100-sxm", 128, True, 16384)
    unmasked, _ = measured_rates(kernel, "h100-sxm", 128, False, 8192)
    assert causal_twice / unmasked == pytest.approx(ratio, abs=1e-3)


def test_b200_causal_passes_follow_the_table_to_128k_then_hold():
    """Charted to 128k, B200's causal rates are read, not extrapolated: 64k is the table's
    value (forward 1493.798, backward 1235.860 TFLOP/s), and past 128k there is no unmasked
    curve to close on, so the 128k value holds."""
    assert measured_rates("cudnn", "b200", 128, True, 65536) == pytest.approx(
        (1493.798e12, 1235.860e12), rel=1e-12
    )
    assert measured_rates("cudnn", "b200", 128, True, 524288) == measured_rates(
        "cudnn", "b200", 128, True, 131072
    )


def test_b200_cudnn_is_timed_from_its_table_and_flash_attention_keeps_the_fraction():
    cudnn = _kernel("b200", "cudnn").pass_seconds_per_flop(128, True, 8192, SCALAR)
    assert cudnn is not None
    forward, backward = measured_rates("cudnn", "b200", 128, True, 8192)
    # half the unmasked FLOPs, at the measured rates (in-training share 1 here)
    assert cudnn[0] == pytest.approx(0.5 / forward, rel=1e-12)
    assert cudnn[1] == pytest.approx(0.5 * 2.5 / backward, rel=1e-12)
    assert _kernel("b200", "flash2").pass_seconds_per_flop(128, True, 8192, SCALAR) is None
