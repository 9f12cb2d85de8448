"""accounting: the layout the trainer runs (strategy -> core Plan) and the predictions made for
it -- every rank's peak from the one per-GPU phase model (core.parallel.memory.gpu_peak through
rank_peak, under the trainer's own framework row), the model state sharded by the strategy's
ZeRO stage. Pure: no torch (a device from the catalog, so no start-up benchmark runs)."""

from __future__ import annotations

import dataclasses

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.memory.gpu_memory import plan_memory, stage_memories
from trainbudget.core.parallel.memory.rank_peak import rank_peak
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.timing.step_time import step_time
from trainbudget.core.single.params import count_params
from trainbudget.core.single.peak_memory import training_peak
from trainbudget.core.spec.frameworks import TRAINBUDGET
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.model_source.model_arg import resolve_model
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.profile.device import DeviceInfo
from trainbudget.train.observe.accounting import make_budget, run_plan
from trainbudget.train.spec.config import TrainConfig
from trainbudget.train.spec.preflight import apply_plan

H100 = DeviceInfo(
    kind="cuda", name="NVIDIA H100 80GB HBM3", catalog_key="h100-sxm", total_memory_bytes=80 * 2**30
)
SPEC = resolve_model("gpt2", ("n_layers=2", "d_model=64", "n_heads=2", "d_ff=256"))
BATCHING = {"micro_batch": 4, "grad_accum": 2, "recompute": "none"}


def budget(strategy: str, world_size: int, zero_shard: int = 0, **kw):
    plan = run_plan(strategy, world_size=world_size, zero_shard=zero_shard, **BATCHING)
    settings = {"precision": "fp32", "optimizer": "adamw", "seq_len": 128, **kw}
    return make_budget(SPEC, plan, device=H100, **settings)


@pytest.mark.parametrize(
    ("strategy", "world_size", "zero", "described"),
    [
        ("ddp", 2, 0, "dp2 tp1 pp1 zero0 mb4x2"),
        ("fsdp", 2, 3, "dp2 tp1 pp1 zero3 mb4x2"),  # fully_shard: ZeRO-3
        ("fsdp", 8, 3, "dp8 tp1 pp1 zero3 mb4x2"),
        ("ddp", 1, 0, "dp1 tp1 pp1 zero0 mb4x2"),
        ("fsdp", 1, 0, "dp1 tp1 pp1 zero0 mb4x2"),  # one process runs no wrapper
    ],
)
def test_strategy_maps_to_the_plan_that_runs(strategy, world_size, zero, described):
    plan = run_plan(strategy, world_size=world_size, **BATCHING)
    assert (plan.dp, plan.zero, plan.n_gpus) == (world_size, zero, world_size)
    assert (plan.micro_batch, plan.grad_accum, plan.recompute) == (4, 2, "none")
    assert plan.flash_attention  # the reference model's fused SDPA
    assert plan.describe() == described


def test_recomputation_is_part_of_the_plan():
    plan = run_plan("fsdp", world_size=2, micro_batch=1, grad_accum=1, recompute="full")
    assert plan.describe() == "dp2 tp1 pp1 zero3 mb1x1 recompute-full"


def test_unknown_strategy_names_the_field():
    with pytest.raises(SpecError, match=r"strategy.*zero3.*ddp, zero1, zero2, fsdp, hsdp"):
        run_plan("zero3", world_size=2, **BATCHING)


@pytest.mark.parametrize(
    ("zero", "zero_shard", "strategy"),
    [(0, 0, "ddp"), (1, 0, "zero1"), (2, 0, "zero2"), (3, 0, "fsdp"), (3, 2, "hsdp")],
)
def test_a_plan_file_round_trips_to_the_layout_that_runs(tmp_path, zero, zero_shard, strategy):
    # preflight turns a plan file into a strategy; run_plan turns it back: every ZeRO stage
    # and HSDP shard group runs as planned (train.spec.strategy)
    asked = Plan(
        dp=4, zero=zero, zero_shard=zero_shard, micro_batch=2, grad_accum=3, recompute="full"
    )
    cfg = apply_plan(TrainConfig(out=str(tmp_path)), asked, world_size=4, explicit=())
    assert cfg.strategy == strategy
    got = run_plan(
        cfg.strategy,
        world_size=4,
        micro_batch=cfg.micro_batch,
        grad_accum=cfg.grad_accum,
        recompute=cfg.recompute,
        zero_shard=cfg.zero_shard,
    )
    assert got == asked


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_one_process_keeps_the_phase_model_of_the_reference_implementation(precision):
    b = budget("ddp", 1, precision=precision)
    # the reference step with the trainer's fused update (the single engine's row); over 2
    # micro-batches the last one's backward starts beside the first one's gradients
    phases = training_peak(
        SPEC, precision=precision, optimizer="adamw", seq_len=128, micro_batch=4, fused_update=True
    ).phases
    grads = count_params(SPEC).total * get_precision(precision).grad_bytes
    want = max(p.total_bytes + (grads if p.phase == "backward start" else 0) for p in phases)
    assert b.predicted_peak_memory_bytes == pytest.approx(want, rel=1e-12)
    assert b.plan.describe() == "dp1 tp1 pp1 zero0 mb4x2"
    assert any("phase model" in note for note in b.notes)


def test_fsdp_shards_the_model_state_over_the_ranks():
    # ZeRO-3 (Rajbhandari et al. 2020, arXiv 1910.02054, Sec. 5.1): parameters, gradients and
    # optimizer state each divided by the data-parallel degree; DDP keeps a full replica
    single, ddp, fsdp = budget("ddp", 1), budget("ddp", 2), budget("fsdp", 2)
    assert ddp.predicted_model_state_bytes == single.predicted_model_state_bytes
    assert fsdp.predicted_model_state_bytes == pytest.approx(ddp.predicted_model_state_bytes / 2)
    assert fsdp.predicted_peak_memory_bytes < ddp.predicted_peak_memory_bytes
    # several ranks: the core's phase model on one rank of that plan under the strategy's
    # engine (the trainer's framework row), called, not re-derived
    for b in (ddp, fsdp):
        want = rank_peak(SPEC, b.plan, seq_len=128, precision="fp32", optimizer="adamw")
        assert b.predicted_peak_memory_bytes == want.total_bytes
        assert b.predicted_peak_memory_bytes_by_rank == (want.total_bytes,) * 2
        assert any(b.plan.describe() in note for note in b.notes)


def test_step_time_is_predicted_for_the_plan_that_runs():
    for b in (budget("ddp", 2), budget("fsdp", 2)):
        cluster = Cluster(hardware=get_hardware("h100-sxm"), n_gpus=2)
        want = step_time(
            SPEC,
            b.plan,
            cluster,
            seq_len=128,
            precision=get_precision("fp32"),
            optimizer=get_optimizer("adamw"),
        )
        assert b.predicted_step_seconds == want.step_seconds > 0


def _core(plan: Plan, precision: str = "fp32"):
    kw = dict(precision=get_precision(precision), optimizer=get_optimizer("adamw"))
    return plan_memory(SPEC, plan, seq_len=128, framework=TRAINBUDGET, **kw)


@pytest.mark.parametrize("strategy", ["zero2", "fsdp"])
def test_every_zero_strategy_shards_the_optimizer_state(strategy):
    # ZeRO (arXiv 1910.02054, Sec. 5.1): stages 1 to 3 all divide the optimizer state by the
    # data-parallel degree; the per-rank prediction summary.json compares with the measure
    ddp, sharded = budget("ddp", 4), budget(strategy, 4)
    assert sharded.predicted_optimizer_state_bytes == pytest.approx(
        ddp.predicted_optimizer_state_bytes / 4
    )
    core = _core(sharded.plan).state
    assert sharded.predicted_optimizer_state_bytes == core.optimizer_state_bytes
    assert sharded.predicted_master_bytes == 0  # fp32: no master copy


def test_zero1_reports_the_even_share_and_peaks_at_the_heaviest_rank():
    # ZeroRedundancyOptimizer deals whole tensors: the ranks' shares add up to the state, so
    # summary.json's one figure per rank is the even share; the peak is the heaviest rank's
    # (the planner's, plan_memory under the trainer's row)
    ddp, zero1 = budget("ddp", 4), budget("zero1", 4)
    assert zero1.predicted_optimizer_state_bytes == pytest.approx(
        ddp.predicted_optimizer_state_bytes / 4
    )
    assert zero1.predicted_peak_memory_bytes == pytest.approx(
        _core(zero1.plan).total_bytes, rel=1e-12
    )


def test_zero2_predicts_what_fsdp2_without_resharding_holds():
    # the peak: the phase model with FSDP2's shard at rest and the whole model gathered until
    # backward (the trainer row's fsdp2-no-reshard engine for ZeRO-2)
    b = budget("zero2", 4)
    assert b.plan.zero == 2
    want = rank_peak(SPEC, b.plan, seq_len=128, precision="fp32", optimizer="adamw")
    assert b.predicted_peak_memory_bytes == want.total_bytes
    # the model state at rest: the parameters sharded as ZeRO-3 shards them (the gathered
    # copy is a buffer of the phases until backward ends), gradients and state ZeRO-2's
    zero3 = _core(dataclasses.replace(b.plan, zero=3))
    assert b.predicted_model_state_bytes == pytest.approx(zero3.state.total_bytes)


def test_zero1_ranks_and_pipeline_stages_get_their_own_prediction():
    # ZeroRedundancyOptimizer's whole-tensor shares: rank 0 owns the embedding's state
    zero1 = budget("zero1", 4)
    by_rank = zero1.predicted_peak_memory_bytes_by_rank
    assert len(by_rank) == 4 and max(by_rank) == zero1.predicted_peak_memory_bytes
    assert by_rank[0] > min(by_rank)
    # a pipeline: each rank its stage's figure, "pp" the outermost mesh axis
    plan = Plan(dp=2, pp=2, micro_batch=2, grad_accum=4)
    b = make_budget(SPEC, plan, device=H100, precision="fp32", optimizer="adamw", seq_len=128)
    stages = stage_memories(
        SPEC,
        plan,
        seq_len=128,
        precision=get_precision("fp32"),
        optimizer=get_optimizer("adamw"),
        framework=TRAINBUDGET,
    )
    first, last = stages["first"].total_bytes, stages["last"].total_bytes
    assert b.predicted_peak_memory_bytes_by_rank == (first, first, last, last)
    assert b.predicted_peak_memory_bytes == max(first, last)


def test_hsdp_shards_over_its_group_only():
    # dp 8 in groups of 2: the model state of ZeRO-3 over 2 ranks, not 8
    hsdp, fsdp2 = budget("hsdp", 8, zero_shard=2), budget("fsdp", 2)
    assert hsdp.plan.describe() == "dp8 tp1 pp1 zero3/shard2 mb4x2"
    assert hsdp.predicted_optimizer_state_bytes == fsdp2.predicted_optimizer_state_bytes
    assert hsdp.predicted_model_state_bytes == fsdp2.predicted_model_state_bytes
