"""Framework memory rows: what each stack keeps on the GPU beside the sharded model state, pinned
to the code each row cites (core/spec/frameworks.py, core/spec/engines.py), and the published
runs pointed at the row of the stack that ran them."""

from __future__ import annotations

import dataclasses
import random

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.layout import PlanNumbers
from trainbudget.core.parallel.memory.gpu_memory import plan_memory
from trainbudget.core.parallel.memory.gpu_peak import gpu_peak
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.search.planner_fast import memory_arrays
from trainbudget.core.single.params import count_params
from trainbudget.core.spec.frameworks import FRAMEWORKS, Framework, get_framework
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset
from trainbudget.published import get_run
from trainbudget.validation import compare, framework_row

SEQ = 4096
SPEC = get_preset("llama-2-7b")
N = count_params(SPEC).total
ADAM = get_optimizer("adam")


def _peak(framework: str, plan: Plan, precision: str = "bf16-mixed", stage: str = "only"):
    return gpu_peak(
        SPEC,
        PlanNumbers.of(plan),
        stage=stage,
        seq_len=SEQ,
        precision=get_precision(precision),
        optimizer=ADAM,
        framework=get_framework(framework),
    )


def _phase(peak, name: str):
    return next(p for p in peak.phases if p.phase == name)


DP8_ZERO1 = Plan(dp=8, zero=1, micro_batch=1, grad_accum=2)


def test_apex_distributed_adam_keeps_remainders_and_a_reduced_shard():
    # NeMo r2.0.0rc1 megatron_base_model.py: fp32 state with bf16 weights ->
    # store_param_remainders (int16, 1/dp); apex StateBucket: exp_avg, exp_avg_sq fp32, 1/dp
    nemo1, megatron = _peak("nemo-1", DP8_ZERO1), _peak("megatron", DP8_ZERO1)
    assert nemo1.state.master_bytes == pytest.approx(N * 2 / 8, rel=1e-12)
    assert megatron.state.master_bytes == pytest.approx(N * 4 / 8, rel=1e-12)
    assert nemo1.state.optimizer_state_bytes == megatron.state.optimizer_state_bytes
    # apex _init_grad_buffer: every bucket's gradients in grad_sync_dtype (fp32 by default),
    # and _finish_bucket_grad_sync keeps each reduced 1/dp shard until zero_grad
    step = _phase(nemo1, "optimizer step")
    assert step.grads_bytes == pytest.approx(N * 4 + N * 4 / 8, rel=1e-12)
    assert _phase(megatron, "optimizer step").grads_bytes == pytest.approx(N * 4, rel=1e-12)
    # the buckets are views of that buffer: no bucket copy in flight (Megatron: two)
    assert step.buffers_bytes == 0
    assert _phase(megatron, "optimizer step").buffers_bytes == pytest.approx(2 * 40e6 * 4)


def test_grad_sync_dtype_and_optimizer_dtype_rows():
    # launcher 24.07 H100 example scripts: +training.model.optim.grad_sync_dtype=bf16
    bf16_grads = _peak("nemo-1-bf16-grads", DP8_ZERO1)
    step = _phase(bf16_grads, "optimizer step")
    assert step.grads_bytes == pytest.approx(N * 2 + N * 2 / 8, rel=1e-12)
    assert bf16_grads.state.master_bytes == pytest.approx(N * 2 / 8, rel=1e-12)
    # nemotron_340b.yaml: dtype bf16 -> bf16 moments and no master copy (store_params False)
    bf16_adam = _peak("nemo-1-bf16-adam", DP8_ZERO1)
    assert bf16_adam.state.master_bytes == 0
    assert bf16_adam.state.optimizer_state_bytes == pytest.approx(N * 2 * 2 / 8, rel=1e-12)


def test_a_precision_without_master_weights_gets_none_from_the_row():
    peak = _peak("nemo-1", DP8_ZERO1, precision="bf16")
    assert peak.state.master_bytes == 0
    # remainders complete a bf16 weight only: fp16 weights keep the fp32 master
    # (megatron_base_model.py: store_params unless the model dtype is bf16)
    fp16 = _peak("nemo-1", DP8_ZERO1, precision="fp16-mixed")
    assert fp16.state.master_bytes == pytest.approx(N * 4 / 8, rel=1e-12)


def test_master_and_state_widths_are_checked_in_one_line():
    with pytest.raises(SpecError, match=r"x\.master_bytes.*3.*must be 0, 2, 4 or None"):
        Framework(name="x", master_bytes=3)
    with pytest.raises(SpecError, match=r"x\.state_bytes.*1.*must be 2, 4 or None"):
        Framework(name="x", state_bytes=1)


def test_megatron_bridge_perf_reduces_in_bf16():
    # Megatron-Bridge perf configs: grad_reduce_in_fp32 = False
    fw = get_framework("megatron-bridge-perf")
    assert fw.main_grad_bytes == 2 and fw.grad_reduce_bytes == 2
    step = _phase(_peak("megatron-bridge-perf", DP8_ZERO1), "optimizer step")
    assert step.grads_bytes == pytest.approx(N * 2, rel=1e-12)


def test_transformer_engine_keeps_fp8_weights_and_transposes_beside_the_16_bit_ones():
    # Megatron-Core TELinear passes is_first_microbatch; TE v1.8 caches the FP8 cast and its
    # transpose (get_fp8_workspace(cache_name="weight")): 2 bytes per linear weight element
    p = count_params(SPEC)
    linear = p.attention_qkv + p.attention_proj + p.mlp
    plan = Plan(dp=2, tp=2, sp=True, zero=1, micro_batch=1, grad_accum=2)
    for name, cached in (
        ("megatron", 2),
        ("nemo-1", 2),
        ("nemo-2", 0),
        ("megatron-bridge-perf", 0),
    ):
        fp8, bf16 = _peak(name, plan, "fp8"), _peak(name, plan, "bf16-mixed")
        end = _phase(fp8, "optimizer step").buffers_bytes
        assert end - _phase(bf16, "optimizer step").buffers_bytes == pytest.approx(
            linear / 2 * cached, rel=1e-12
        )
    # NeMo 2 and Megatron-Bridge keep FP8 primary weights (fp8_params / fp8_param_gather);
    # a recipe that casts per use (torchao's float8 under torchtitan) keeps none
    assert FRAMEWORKS["torchtitan"].fp8_weight_cache_bytes == 0


ZERO3 = Plan(dp=8, zero=3, micro_batch=1, grad_accum=1, recompute="full")


def test_deepspeed_zero3_keeps_its_reduce_buffer_and_offloads_the_gradients():
    # DeepSpeed 0.19.2 stage3.py: the IPG buffer, reduce_bucket_size (5e8) bf16 elements
    ds, neutral = _peak("deepspeed", ZERO3), _peak("deepspeed-2021", ZERO3)
    end_ds, end_neutral = _phase(ds, "backward end"), _phase(neutral, "backward end")
    assert end_ds.buffers_bytes - end_neutral.buffers_bytes == pytest.approx(5e8 * 2)
    # with offload_optimizer the optimizer's device, and its gradient partitions, are the CPU
    offloaded = _peak("deepspeed", dataclasses.replace(ZERO3, offload_optimizer="cpu"))
    assert _phase(ds, "backward end").grads_bytes == pytest.approx(N * 2 / 8, rel=1e-12)
    assert _phase(offloaded, "backward end").grads_bytes == 0
    host = N * (4 + 8) / 8 + N * 2 / 8  # fp32 master and Adam's moments, and the gradients
    assert offloaded.host_bytes == pytest.approx(host, rel=1e-12)


def test_fsdp2_under_torch_pipelining_keeps_the_stage_gathered_and_reduces_once():
    # torch 2.13 pipelining/stage.py: set_reshard_after_backward(False) and
    # set_requires_gradient_sync(False) for every micro-batch, one REDUCE_GRAD at the end
    plan = Plan(dp=4, pp=2, zero=3, micro_batch=1, grad_accum=4)
    first = _peak("torchtitan", plan, stage="first")
    last_mb = _phase(first, "backward start (last micro-batch)")
    # unsharded over dp = 4, and upcast from bf16 to torchtitan's fp32 reduce dtype (torch
    # 2.13 _fsdp_param.py to_accumulated_grad_if_needed): 4 x 4 / 2 the sharded bf16 gradient
    assert last_mb.grads_bytes == pytest.approx(4 * 2 * first.state.grads_bytes, rel=1e-12)
    assert last_mb.buffers_bytes >= 4 * first.state.params_bytes
    alone = _peak("torchtitan", dataclasses.replace(plan, pp=1, dp=8))
    assert first.total_bytes > alone.total_bytes


def _random_plans(n: int) -> list[Plan]:
    rng, out = random.Random(23), []
    while len(out) < n:
        dp, tp, pp = rng.choice([1, 2, 4]), rng.choice([1, 2]), rng.choice([1, 2])
        out.append(
            Plan(
                dp=dp,
                tp=tp,
                pp=pp,
                sp=tp > 1,
                zero=rng.choice([0, 1, 2, 3]) if dp > 1 else 0,
                micro_batch=1,
                grad_accum=rng.choice([1, 2, 4]),
                recompute=rng.choice(["none", "selective", "full"]),
                offload_optimizer="cpu" if dp > 1 and rng.random() < 0.3 else "none",
            )
        )
    return out


@pytest.mark.parametrize(
    "name", ["nemo-1", "nemo-1-bf16-grads", "nemo-1-bf16-adam", "deepspeed", "megatron-bridge-perf"]
)
def test_the_grid_gives_each_plan_s_peak(name):
    spec = dataclasses.replace(SPEC, n_layers=4)
    fw, prec = FRAMEWORKS[name], get_precision("bf16-mixed")
    plans = _random_plans(40)
    kw = dict(seq_len=1024, precision=prec, optimizer=ADAM, framework=fw)
    grid = memory_arrays(spec, PlanNumbers.of_many(plans), **kw)
    for plan, total in zip(plans, grid, strict=True):
        assert total == pytest.approx(plan_memory(spec, plan, **kw).total_bytes, rel=1e-9)


RUN_ROWS = {
    "nemo2407-llama2-7b-8gpu": "nemo-1-bf16-grads",
    "nemo2407-gpt3-20b-64gpu": "nemo-1-bf16-grads",
    "nemo2407-nemotron-8b-64gpu": "nemo-1",
    "nemo2407-nemotron-340b-128gpu": "nemo-1-bf16-adam",
    "dgxc-llama31-70b-bf16-64gpu": "nemo-1-bf16-grads",
    "dgxc-nemotron4-340b-bf16-128gpu": "nemo-1-bf16-adam",
    "nemo-longctx-llama2-7b-h100-4k": "nemo-1",
    "nemo-longctx-llama3-8b-b200-16k": "nemo",  # NeMo 25.04: NeMo 2, the nemo-2 row
    "mbridge-2511-llama3-70b-h100-64gpu": "megatron-bridge-perf",
}


@pytest.mark.parametrize("run_id", sorted(RUN_ROWS))
def test_published_runs_name_the_stack_that_ran_them(run_id):
    assert get_run(run_id).framework == RUN_ROWS[run_id]


def test_each_stack_is_predicted_with_its_row():
    rows = {"nemo": "nemo-2", "nemo-1-bf16-adam": "nemo-1-bf16-adam", "deepspeed": "deepspeed"}
    rows |= {"megatron-bridge-perf": "megatron-bridge-perf", "megatron": "megatron"}
    for stack, row in rows.items():
        assert framework_row(stack).name == row


@pytest.mark.parametrize(
    "run_id",
    [
        "nemo2407-llama2-7b-8gpu",
        "nemo2407-gpt3-175b-128gpu",
        "nemo2407-nemotron-340b-128gpu",
        "dgxc-llama31-70b-bf16-64gpu",
        "dgxc-nemotron4-340b-bf16-128gpu",
    ],
)
def test_nemo_1_runs_that_completed_fit_their_gpu(run_id):
    # predicted over 72 GB (90 % of 80 GB) with Megatron-Core's fp32 main_grad and fp32 masters
    c = compare(get_run(run_id))
    assert c.predicted_memory_bytes < 0.9 * c.gpu_memory_bytes


def test_fsdp2_without_sync_keeps_the_unsharded_gradients_in_its_reduce_dtype():
    # torch 2.13 _fsdp_param.py to_accumulated_grad_if_needed: with reduce_dtype (fp32) unlike
    # the bf16 gradients, a no-sync backward upcasts each unsharded gradient and later ones
    # add into it. KempnerForge (maybe_no_sync, reduce_dtype fp32): N x 4 bytes at the last
    # micro-batch's backward start; torchtitan reduce-scatters each micro-batch: the bf16
    # shard; the trainer's FSDP2 sets no reduce dtype: unsharded, in the gradient dtype
    plan = Plan(dp=8, zero=3, micro_batch=1, grad_accum=4, recompute="full")
    name = "backward start (last micro-batch)"
    grads = {
        fw: _phase(_peak(fw, plan, precision="bf16"), name).grads_bytes
        for fw in ("kempnerforge", "torchtitan", "trainbudget")
    }
    assert grads == pytest.approx(
        {"kempnerforge": N * 4, "torchtitan": N * 2 / 8, "trainbudget": N * 2}, rel=1e-12
    )


def test_the_kempnerforge_runs_use_its_row():
    row = framework_row(get_run("kforge-70b-tp4-fsdp8-32gpu").framework)
    assert row is get_framework("kempnerforge")
    # parallel.py default_mp_policy: reduce_dtype=torch.float32; train.py: F.cross_entropy
    # on the bf16 logits the TP head gathers (ColwiseParallel(output_layouts=Replicate()))
    assert row.grad_reduce_bytes == 4 and row.loss_kernel == "gathered-16bit-cross-entropy"
    assert set(row.engines[1:]) == {"fsdp2"}  # fully_shard on every data-parallel mesh


def test_a_token_embedding_left_out_of_the_tp_plan_is_whole_on_every_tp_rank():
    # KempnerForge tensor_parallel.py 'Token embedding: Replicated': each of 4 TP ranks keeps
    # the V x d table, sharded over dp = 2 by FSDP2 only -- 3/4 of it more than a
    # vocabulary-parallel embedding, in pure bf16 weights (2 B) and Adam moments (2 x 2 B)
    plan = Plan(dp=2, tp=4, sp=True, zero=3, micro_batch=1, grad_accum=1, recompute="full")
    row = get_framework("kempnerforge")
    split = dataclasses.replace(row, tp_splits_embedding=True)
    kw = dict(stage="only", seq_len=SEQ, precision=get_precision("bf16"), optimizer=ADAM)
    whole = gpu_peak(SPEC, PlanNumbers.of(plan), framework=row, **kw).state
    parted = gpu_peak(SPEC, PlanNumbers.of(plan), framework=split, **kw).state
    extra = SPEC.vocab_size * SPEC.d_model * 3 / 4 / 2
    assert whole.params_bytes - parted.params_bytes == pytest.approx(extra * 2, rel=1e-12)
    assert whole.optimizer_bytes - parted.optimizer_bytes == pytest.approx(extra * 4, rel=1e-12)
