"""Framework rows (core/spec/frameworks.py): each field pinned next to where it comes from."""

from __future__ import annotations

import dataclasses

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.memory.gpu_memory import plan_memory
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.timing.step_time import step_time
from trainbudget.core.single.params import count_params
from trainbudget.core.spec.frameworks import (
    FRAMEWORKS,
    GENERIC,
    Framework,
    get_framework,
)
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset
from trainbudget.core.units import MB


def test_table_names():
    assert set(FRAMEWORKS) == {
        "generic", "megatron", "torchtitan", "deepspeed", "pytorch-fsdp1",
        "megatron-legacy", "deepspeed-2021", "trainbudget", "nemo-1", "nemo-1-bf16-grads",
        "nemo-1-bf16-adam", "nemo-2", "megatron-bridge-perf", "kempnerforge", "nanotron",
        "internlm-2023", "deepspeed-0.19.2",
    }  # fmt: skip
    for name, fw in FRAMEWORKS.items():
        assert fw.name == name and fw.description and fw.sources


def test_generic():
    # torch.nn.parallel.DistributedDataParallel: bucket_cap_mb=25
    assert get_framework("generic") is GENERIC
    assert GENERIC.grad_reduce_bytes is None and GENERIC.main_grad_bytes is None
    assert not GENERIC.reduce_every_micro_batch
    assert GENERIC.bucket_bytes == 25 * MB
    assert GENERIC.runtime_overhead_bytes == 0


def test_megatron():
    fw = get_framework("megatron")
    # Megatron-LM arguments.py: --bf16 with --main-grads-dtype fp32 (default) sets
    # accumulate_allreduce_grads_in_fp32 -> DistributedDataParallelConfig.grad_reduce_in_fp32
    assert fw.grad_reduce_bytes == 4 and fw.main_grad_bytes == 4
    # distributed_data_parallel.py no_sync(): reduce on the last micro-batch only
    assert not fw.reduce_every_micro_batch
    # distributed_data_parallel.py: bucket_size = max(40000000, 1000000 * dp) parameters, fp32
    assert fw.bucket_bytes == 40_000_000 * 4
    assert fw.runtime_overhead_bytes == 0  # not sourced
    # arguments.py --no-overlap-p2p-communication (store_false): overlap_p2p_comm on under the
    # interleaved schedule; NeMo's rows inherit it (megatron_comm_overlap.py: vp_size > 1)
    assert fw.overlaps_p2p_interleaved
    assert all(get_framework(n).overlaps_p2p_interleaved for n in ("nemo-1", "nemo-2"))


def test_torchtitan():
    fw = get_framework("torchtitan")
    # torchtitan 0.2.2 config/configs.py: mixed_precision_reduce = "float32"
    assert fw.grad_reduce_bytes == 4
    # FSDP2's fp32 sharded parameter + gradient total bf16-mixed's 2 + 2 + 4 bytes
    assert fw.main_grad_bytes is None
    # trainer.py: no set_requires_gradient_sync(False) across gradient-accumulation steps
    assert fw.reduce_every_micro_batch
    assert fw.bucket_bytes == 25 * MB  # FSDP2 reduces per fully_shard unit: generic kept
    assert fw.runtime_overhead_bytes == 0  # not sourced
    # _fsdp_collectives.foreach_all_gather_copy_out: split_with_sizes_copy on the compute stream
    assert fw.gather_copy_out and not fw.regathers_for_recompute


def test_deepspeed():
    fw = get_framework("deepspeed")
    # DeepSpeed 0.19.6 constants.py: grad_accum_dtype None -> model dtype; engine.py
    # communication_data_type: bf16 when bf16 is enabled
    assert fw.grad_reduce_bytes is None and fw.main_grad_bytes is None
    # engine.py allreduce_gradients: ZeRO stage >= 2 communicates every micro-batch
    assert fw.reduce_every_micro_batch
    # zero/config.py: reduce_bucket_size default 5e8 elements, bf16 (2 bytes)
    assert fw.bucket_bytes == 500_000_000 * 2
    assert fw.runtime_overhead_bytes == 0  # not sourced
    # parameter_offload.py: the recomputed forward runs the sub-module fetch hooks again
    assert fw.regathers_for_recompute and not fw.gather_copy_out
    # zero/stage_1_and_2.py step(): all_gather_dp_groups after the update, in the same call
    assert fw.param_gather_after_step and fw.param_gather_bytes is None


def test_pytorch_fsdp1():
    fw = get_framework("pytorch-fsdp1")
    # torch/distributed/fsdp/api.py MixedPrecision: reduce_dtype None takes param_dtype
    assert fw.grad_reduce_bytes is None and fw.main_grad_bytes is None
    # fully_sharded_data_parallel.py no_sync(): outside it every backward reduce-scatters
    assert fw.reduce_every_micro_batch
    assert fw.bucket_bytes == 25 * MB
    assert fw.runtime_overhead_bytes == 0  # not sourced
    # the FlatParameter's views of the all-gather output, its unit wrapping the checkpoint
    assert not fw.gather_copy_out and not fw.regathers_for_recompute


def test_megatron_legacy():
    """Megatron-LM 27fc468 (2021-02) to 3c92fa9 (2023-03): --no-scatter-gather-tensors-in-
    pipeline, on by default; everything else as the megatron row."""
    fw, now = get_framework("megatron-legacy"), get_framework("megatron")
    assert fw.pipeline_scatter_gather and not now.pipeline_scatter_gather
    assert fw.historical and not now.historical
    same = ("grad_reduce_bytes", "main_grad_bytes", "reduce_every_micro_batch", "bucket_bytes")
    assert all(getattr(fw, f) == getattr(now, f) for f in same)


def test_deepspeed_2021():
    """DeepSpeed v0.3.13-v0.5.0 partition_parameters.py _allgather_param: one all_gather per
    parameter after torch.cuda.synchronize(); the rest as the deepspeed row."""
    fw, now = get_framework("deepspeed-2021"), get_framework("deepspeed")
    assert fw.zero3_serial_per_tensor and not now.zero3_serial_per_tensor
    assert fw.historical and not now.historical
    same = ("grad_reduce_bytes", "reduce_every_micro_batch", "regathers_for_recompute")
    assert all(getattr(fw, f) == getattr(now, f) for f in same)
    assert fw.bucket_bytes == now.bucket_bytes  # stage3.py: reduce_bucket_size=500000000


def test_unknown_name_lists_known():
    with pytest.raises(SpecError, match=r"framework.*megatron.*pytorch-fsdp1.*torchtitan"):
        get_framework("megatron-lm")


def test_bad_field_is_one_line_error():
    with pytest.raises(SpecError, match=r"x\.grad_reduce_bytes"):
        Framework(name="x", grad_reduce_bytes=3)


def test_assumption_line():
    assert GENERIC.assumption().startswith("framework: generic (none named; ")
    assert get_framework("megatron").assumption().startswith("framework: megatron (")


KW = dict(seq_len=2048, precision=get_precision("bf16-mixed"), optimizer=get_optimizer("adamw"))
SPEC = get_preset("llama-2-7b")
CLUSTER = Cluster(hardware=get_hardware("h100-sxm"), n_gpus=16, gpus_per_node=8)


@pytest.mark.parametrize("zero", [0, 1, 3])
def test_generic_leaves_output_unchanged(zero):
    plan = Plan(dp=16, zero=zero, grad_accum=4, recompute="full")
    assert dataclasses.asdict(step_time(SPEC, plan, CLUSTER, **KW)) == dataclasses.asdict(
        step_time(SPEC, plan, CLUSTER, framework=GENERIC, **KW)
    )
    assert plan_memory(SPEC, plan, **KW) == plan_memory(SPEC, plan, framework=GENERIC, **KW)


def test_deepspeed_gathers_a_third_time_under_full_recomputation():
    """ZeRO-3 with full recomputation: 3 gathers of each layer per micro-batch for DeepSpeed
    (the recomputed forward fetches again), 2 for FSDP1; the same bytes each."""
    plan = Plan(dp=16, zero=3, grad_accum=2, recompute="full")
    ds = step_time(SPEC, plan, CLUSTER, framework=get_framework("deepspeed"), **KW)
    fsdp = step_time(SPEC, plan, CLUSTER, framework=get_framework("pytorch-fsdp1"), **KW)
    assert ds.comm_bytes["zero3_gather"] == pytest.approx(1.5 * fsdp.comm_bytes["zero3_gather"])
    no_recompute = dataclasses.replace(plan, recompute="none")
    ds_none = step_time(SPEC, no_recompute, CLUSTER, framework=get_framework("deepspeed"), **KW)
    assert ds_none.comm_bytes["zero3_gather"] == pytest.approx(fsdp.comm_bytes["zero3_gather"])


def test_fsdp2_copy_out_is_one_read_and_write_of_each_gathered_layer():
    """torchtitan's row adds, per gather, the stage's weights read and written at the HBM rate
    memory-bound kernels reach (0.85 of H100's 3.35 TB/s), in series with the compute: the
    same plan under a row that differs only in gather_copy_out is that much faster."""
    plan = Plan(dp=16, zero=3, grad_accum=2)
    titan = get_framework("torchtitan")
    views = dataclasses.replace(titan, gather_copy_out=False)
    with_copy = step_time(SPEC, plan, CLUSTER, framework=titan, **KW)
    without = step_time(SPEC, plan, CLUSTER, framework=views, **KW)
    weights = count_params(SPEC).total * 2  # bf16, one GPU holds them all after the gather
    moved = 2 * 2 * weights * 2  # 2 gathers x 2 micro-batches, read + write
    hbm = CLUSTER.hardware.hbm_bytes_per_second * 0.85
    extra = with_copy.breakdown_seconds["dp_comm"] - without.breakdown_seconds["dp_comm"]
    assert extra == pytest.approx(moved / hbm)


GPT = get_preset("gpt3-175b")
A100 = get_hardware("a100-80gb")


def test_scatter_gather_splits_pipeline_messages_across_the_tp_group():
    """Without SP the legacy row sends 1/tp of each stage boundary's activation over the
    network, then all-gathers it inside the node: its pipeline time is far below the
    megatron row's (whole activations over InfiniBand); with SP both send 1/tp and agree."""
    cluster = Cluster(hardware=A100, n_gpus=64, gpus_per_node=8)
    legacy, now = get_framework("megatron-legacy"), get_framework("megatron")
    plan = Plan(tp=8, pp=8, grad_accum=16, recompute="full")
    old = step_time(GPT, plan, cluster, framework=legacy, **KW)
    new = step_time(GPT, plan, cluster, framework=now, **KW)
    # one micro-batch's activation, 2 crossings x 16 micro-batches; tp 8: an eighth of it
    whole = 2 * 16 * 2048 * GPT.d_model * 2
    assert new.comm_bytes["pp"] == pytest.approx(whole)
    gathered = whole * 7 / 8  # the all-gather: each rank sends its piece to 7 others
    assert old.comm_bytes["pp"] == pytest.approx(whole / 8 + gathered)
    assert old.breakdown_seconds["pp_comm"] < new.breakdown_seconds["pp_comm"] / 3
    sp = dataclasses.replace(plan, sp=True)
    assert step_time(GPT, sp, cluster, framework=legacy, **KW).breakdown_seconds == (
        step_time(GPT, sp, cluster, framework=now, **KW).breakdown_seconds
    )


def test_per_tensor_zero3_pays_every_collective_and_its_latency():
    """deepspeed-2021: the same bytes as the deepspeed row, one collective per parameter
    tensor (12 a GPT layer) instead of per layer, none hidden: the exposed data-parallel time
    is the whole of the gathers and reduce-scatters."""
    cluster = Cluster(hardware=A100, n_gpus=384, gpus_per_node=8)
    plan = Plan(dp=384, zero=3, micro_batch=4, recompute="full")
    old = step_time(GPT, plan, cluster, framework=get_framework("deepspeed-2021"), **KW)
    new = step_time(GPT, plan, cluster, framework=get_framework("deepspeed"), **KW)
    for name in ("zero3_gather", "dp_grad_reduce"):
        assert old.comm_bytes[name] == pytest.approx(new.comm_bytes[name])
    total = old.comm_seconds["zero3_gather"] + old.comm_seconds["dp_grad_reduce"]
    assert old.breakdown_seconds["dp_comm"] == pytest.approx(total)
    assert new.breakdown_seconds["dp_comm"] < total / 2
    # NCCL's ring over 384 ranks in 48 nodes: 336 NVLink steps of 5 us, 47 network ones of
    # 10 us, per collective; 12 x 96 + 4 tensors, 3 gathers and 1 reduce-scatter each
    latency = 336 * 5e-6 + 47 * 10e-6
    tensors = 12 * 96 + 4  # token and position embeddings, the final norm's weight and bias
    added = old.comm_seconds["zero3_gather"] - new.comm_seconds["zero3_gather"]
    assert added == pytest.approx(3 * (tensors - 96) * latency, rel=1e-6)


def test_nanotron():
    fw = get_framework("nanotron")
    # nanotron c2528430 examples/config_tiny_llama.yaml: accumulate_grad_in_fp32: true; the
    # FP32GradientAccumulator's buffer is fp32 and is what DP reduces
    assert fw.grad_reduce_bytes == 4 and fw.main_grad_bytes == 4
    # gradient_accumulator.py _accumulate_grad: fp32_grad.add_(half_param.grad) after each
    # backward: the bf16 gradient read (2), the fp32 buffer read and written (4 + 4)
    assert fw.grad_accumulation_bytes == 2 + 4 + 4
    # trainer.py: no DDP under ZeRO with fp32 accumulation, one all-reduce after the backward;
    # zero.py: the optimizer's fp32 parameters gathered inside step()
    assert fw.sharded_grads_all_reduced_after_backward
    assert fw.param_gather_after_step and fw.param_gather_bytes == 4
    assert not fw.overlaps_p2p_interleaved


def test_fp32_accumulation_adds_its_bytes_to_every_micro_batch():
    """The nanotron row's accumulation: 10 bytes per parameter of the stage per micro-batch,
    at the HBM rate the step's memory-bound kernels get, on top of the generic row's compute
    (the memory- and compute-bound terms both read the same hardware row)."""
    from trainbudget.core.parallel.timing.efficiency import DEFAULT_EFFICIENCY

    hw = get_hardware("h100-sxm")
    cluster = Cluster(hardware=hw, n_gpus=8, gpus_per_node=8)
    plan = Plan(dp=8, grad_accum=4)
    fw = dataclasses.replace(GENERIC, grad_accumulation_bytes=10)
    base = step_time(GPT, plan, cluster, framework=GENERIC, **KW).compute_seconds
    more = step_time(GPT, plan, cluster, framework=fw, **KW).compute_seconds
    rate = hw.hbm_bytes_per_second * DEFAULT_EFFICIENCY.resolved(hw, "flash2").hbm
    assert more - base == pytest.approx(4 * count_params(GPT).total * 10 / rate, rel=1e-6)


def test_a_gather_inside_the_step_is_exposed_whole():
    """ZeRO-1: the generic row hides the gather of the updated weights behind the next
    forward; a row that gathers inside the optimizer step (DeepSpeed's all_gather_dp_groups)
    pays all of it, and one that all-reduces the gradients after the backward (nanotron) pays
    that too."""
    cluster = Cluster(hardware=A100, n_gpus=64, gpus_per_node=8)
    plan = Plan(dp=64, zero=1, grad_accum=2)
    hidden = step_time(GPT, plan, cluster, framework=GENERIC, **KW)
    late = dataclasses.replace(GENERIC, param_gather_after_step=True)
    t = step_time(GPT, plan, cluster, framework=late, **KW)
    gather = t.comm_seconds["dp_param_gather"]
    assert gather == pytest.approx(hidden.comm_seconds["dp_param_gather"])
    assert t.breakdown_seconds["dp_comm"] > gather > hidden.breakdown_seconds["dp_comm"]
    both = dataclasses.replace(late, sharded_grads_all_reduced_after_backward=True)
    t2 = step_time(GPT, plan, cluster, framework=both, **KW)
    # one all-reduce of the whole gradient, exposed with the gather
    assert t2.comm_bytes["dp_grad_reduce"] == pytest.approx(2 * t.comm_bytes["dp_grad_reduce"])
    exposed = t2.comm_seconds["dp_grad_reduce"] + t2.comm_seconds["dp_param_gather"]
    assert t2.breakdown_seconds["dp_comm"] == pytest.approx(exposed)


def test_bad_gather_bytes_is_one_line_error():
    with pytest.raises(SpecError, match="param_gather_bytes"):
        dataclasses.replace(GENERIC, param_gather_bytes=3)
    with pytest.raises(SpecError, match="grad_accumulation_bytes"):
        dataclasses.replace(GENERIC, grad_accumulation_bytes=-1)


def test_internlm_2023():
    fw = get_framework("internlm-2023")
    # InternLM 20fe5ac2 hybrid_zero_optim.py: .grad accumulated by AccumulateGrad in bf16
    # (2 + 2 read, 2 written), the first micro-batch's assigned
    assert fw.grad_accumulation_bytes == 6 and fw.grad_accumulation_first_free
    # step(): inf check 10, norm 10, flatten + cast + unscale 18, torch 1.13's for-loop AdamW
    # 88, the copy back 6; broadcast_params(overlap=False) inside step()
    assert fw.optimizer_bytes_per_param == 132
    assert fw.param_gather_after_step and fw.historical


def test_deepspeed_0_19_2_offload_trips():
    """DeepSpeed 0.19.2 stage3.py partition_grads: bf16 down, back up, fp32 down at the
    boundary: 8 bytes a parameter over the link, exposed; the current row moves 2."""
    old, new = get_framework("deepspeed-0.19.2"), get_framework("deepspeed")
    assert old.offload_grad_bytes == 8 and new.offload_grad_bytes is None
    assert old.offload_update_then_copy and new.offload_update_then_copy
    cluster = Cluster(hardware=get_hardware("h100-sxm"), n_gpus=8, gpus_per_node=8)
    plan = Plan(dp=8, zero=3, offload_optimizer="cpu", recompute="full")
    llama = get_preset("llama-3-8b")
    t_old = step_time(llama, plan, cluster, framework=old, **KW)
    t_new = step_time(llama, plan, cluster, framework=new, **KW)
    shard = count_params(llama).total / 8
    link = cluster.pcie_bytes_per_second
    added = t_old.breakdown_seconds["offload"] - t_new.breakdown_seconds["offload"]
    assert added == pytest.approx(shard * (8 - 2) / link, rel=1e-6)


def test_weights_go_up_after_the_host_update_when_the_row_says_so():
    """offload_update_then_copy: the 16-bit weights converted on the host (the fp32 master read,
    the copy written: 6 bytes at the host's memory rate) and sent over the link after the
    update, not hidden beside it."""
    cluster = Cluster(hardware=get_hardware("h100-sxm"), n_gpus=8, gpus_per_node=8)
    plan = Plan(dp=8, zero=2, offload_optimizer="cpu")
    llama = get_preset("llama-3-8b")
    beside = step_time(llama, plan, cluster, framework=GENERIC, **KW)
    after = dataclasses.replace(GENERIC, offload_update_then_copy=True)
    t = step_time(llama, plan, cluster, framework=after, **KW)
    shard = count_params(llama).total / 8
    up = (
        shard * 2 / cluster.pcie_bytes_per_second + shard * 6 / cluster.host_memory_bytes_per_second
    )
    down = shard * 2 / cluster.pcie_bytes_per_second
    assert t.breakdown_seconds["offload"] == pytest.approx(down + up, rel=1e-6)
    assert beside.breakdown_seconds["offload"] < t.breakdown_seconds["offload"]
