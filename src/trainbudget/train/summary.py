"""The end of a run: predicted vs measured step time, memory and MFU, the loss against the
corpus's unigram entropy, what the run survived (skipped steps, rollbacks, checkpoints), and
the strategy that ran with each rank's measured optimizer state and peak beside the plan's
per-rank predictions (train.observe.rank_memory); and comm.json's document, the step's counted
collectives beside the plan's (`run_comm`)."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

import torch
from torch.distributed.tensor import DTensor

from trainbudget.core.parallel.memory.rank_peak import expert_rows_bytes
from trainbudget.core.spec.precision import get_precision
from trainbudget.profile.memory import measure_step_memory
from trainbudget.train.observe.comm_count import COUNTED_STEP, gather_tallies
from trainbudget.train.observe.comm_differences import RunFacts
from trainbudget.train.observe.comm_report import comm_document
from trainbudget.train.observe.rank_memory import gather_records, rank_record
from trainbudget.train.observe.step_roofline import BUSY_CPU_SHARE
from trainbudget.train.parallel import expert_parallel
from trainbudget.train.spec.pipeline_split import pipeline_engine
from trainbudget.train.spec.strategy import alone_note, engine_name

PEAK_TOLERANCE_PERCENT = 3.0
"""How far a rank's measured peak may be from the prediction before the run says so (issue 14:
'per-rank peak memory within 3 % of the prediction')."""

if TYPE_CHECKING:
    from trainbudget.train.observe.accounting import Budget
    from trainbudget.train.run import Run


def memory_bytes(device: torch.device, budget: Budget) -> dict:
    """Predicted peak and model state per rank (core, for the layout that runs) and, on CUDA,
    the allocator's measured peak (None elsewhere)."""
    measured = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return {
        "predicted_peak": budget.predicted_peak_memory_bytes,
        "predicted_model_state": budget.predicted_model_state_bytes,
        "measured_peak": measured,
    }


def per_rank_memory(run: Run) -> dict:
    """The strategy that ran, its mesh, and per rank the measured optimizer state, fp32 master
    weights and peak against the plan's prediction for one rank. A collective: every rank
    calls it (summarize does)."""
    records = gather_records(rank_record(run.info, run.optimizer, run.peak_meter), run.info)
    budget = run.budget
    if run.mesh is None:
        strategy, engine, mesh = "single", "one process, no wrapper", {}
    else:
        cfg = run.cfg
        stage_world = run.info.world_size // cfg.pp  # the ranks of one pipeline stage
        strategy, engine = (
            cfg.strategy,
            engine_name(
                cfg.strategy,
                world_size=stage_world,
                tp=cfg.tp,
                sequence_parallel=cfg.sequence_parallel,
            ),
        )
        if cfg.pp > 1:
            engine = pipeline_engine(
                cfg.pp_schedule,
                pp=cfg.pp,
                vpp=cfg.vpp,
                dp=stage_world // cfg.tp,
                dp_engine=engine,
                tp=cfg.tp,
            )
        mesh = dict(zip(run.mesh.mesh_dim_names, run.mesh.shape, strict=True))
        engine, mesh = expert_parallel.described(run.model, engine, mesh)
    methods = {r["peak_method"] for r in records} - {None}
    predicted = budget.predicted_peak_memory_bytes
    return {
        "strategy": strategy,
        "strategy_engine": engine,
        "mesh": mesh,
        "optimizer_state_bytes_per_rank": {
            "predicted": budget.predicted_optimizer_state_bytes,
            "measured": [r["optimizer_state"] for r in records],
        },
        "master_weight_bytes_per_rank": {
            "predicted": budget.predicted_master_bytes,
            "measured": [r["master_weights"] for r in records],
        },
        "peak_memory_bytes_per_rank": {
            "predicted": predicted,
            "measured": [r["peak"] for r in records],
            "method": methods.pop() if methods else None,
            "ranks": [_rank_row(run, r) for r in records],
        },
    }


def _rank_row(run: Run, record: dict) -> dict:
    """`rank_peak_row` against the plan's prediction for the rank; under expert parallelism
    at the routing the rank's measured step had (`routed_prediction`), the balanced figure
    kept beside it."""
    balanced = rank_prediction(run.budget, record["rank"])
    rows = record.get("expert_rows_received")
    if rows is None:
        return rank_peak_row(record, balanced)
    routed = routed_prediction(run, balanced, rows)
    return {
        **rank_peak_row(record, routed),
        "peak_bytes_predicted_balanced": balanced,
        "expert_rows_received": rows,
    }


def routed_prediction(run: Run, balanced: float, rows: int) -> float:
    """An expert-parallel rank's predicted peak at the routing its measured step had: the
    balanced prediction plus what the rows its experts received beyond (or short of) their
    balanced share hold (`core.parallel.memory.rank_peak.expert_rows_bytes`)."""
    extra = expert_rows_bytes(
        run.spec,
        run.budget.plan,
        rows_received=rows,
        seq_len=run.cfg.seq_len,
        activation_bytes=get_precision(run.cfg.precision).activation_bytes,
    )
    return balanced + extra


def rank_prediction(budget: Budget, rank: int) -> float:
    """The plan's predicted peak for `rank` (train.observe.accounting)."""
    by_rank = budget.predicted_peak_memory_bytes_by_rank
    return by_rank[rank] if by_rank else budget.predicted_peak_memory_bytes


def rank_peak_row(record: dict, predicted: float) -> dict:
    """One rank's measured peak against the plan's prediction for it (error None when not
    measured)."""
    measured = record["peak"]
    error = 100 * (measured / predicted - 1) if measured is not None and predicted else None
    return {
        "rank": record["rank"],
        "peak_bytes_measured": measured,
        "peak_bytes_predicted": predicted,
        "error_percent": error,
        "instrument": record["peak_method"],
    }


def peak_notes(ranks: list[dict]) -> list[str]:
    """A note for each rank whose measured peak is off the prediction by more than
    PEAK_TOLERANCE_PERCENT."""
    return [
        f"rank {r['rank']}: measured peak memory {r['peak_bytes_measured']:,} bytes is "
        f"{r['error_percent']:+.1f}% off the predicted {r['peak_bytes_predicted']:,.0f} "
        f"(beyond {PEAK_TOLERANCE_PERCENT:g}%; {r['instrument']})"
        for r in ranks
        if r["error_percent"] is not None and abs(r["error_percent"]) > PEAK_TOLERANCE_PERCENT
    ]


def _cpu_share(state) -> float | None:
    """The process's CPU seconds over wall seconds x threads during the timed steps: about 1
    on cores of its own, less when other processes took them (train.observe.step_roofline)."""
    wall = sum(state.step_times)
    return state.step_cpu_seconds / (wall * torch.get_num_threads()) if wall else None


def summarize(run: Run) -> dict:
    cfg, budget, world_size, state = run.cfg, run.budget, run.info.world_size, run.state
    measured = statistics.median(state.step_times) if state.step_times else None
    tps = run.tokens_per_step / measured if measured else None
    device = run.device
    out = {
        "steps": cfg.steps,
        "plan": budget.plan.describe(),
        "tokens_per_step": run.tokens_per_step,
        "loss_first_logged": state.first_loss,
        "loss_final": state.last_loss,
        "unigram_entropy_nats": run.data.unigram_entropy(),
        "step_seconds": {"measured_median": measured, "predicted": budget.predicted_step_seconds},
        "tokens_per_second": tps,
        "mfu": {"measured": budget.mfu(tps / world_size) if tps else None},
        "memory_bytes": memory_bytes(device, budget),
        **per_rank_memory(run),
        "device": budget.device.as_dict(),
        "world_size": world_size,
        "reliability": {
            **run.guard.counters(),
            "checkpoints_written": state.checkpoints_written,
            "last_checkpoint_seconds": state.save_seconds,
        },
        "notes": list(budget.notes),
    }
    alone = alone_note(cfg.strategy, world_size=world_size)
    if alone:
        out["notes"].append(alone)
    if budget.roofline is not None:  # off the catalog: what the predicted step time stands on
        out["roofline"] = budget.roofline.as_dict()
        share = _cpu_share(state)
        out["step_seconds"]["cpu_share"] = share
        if share is not None and share < BUSY_CPU_SHARE:
            out["notes"].append(
                f"the run's steps got {100 * share:.0f}% of its {torch.get_num_threads()} "
                "thread(s)' CPU time: other processes slowed the measured step time"
            )
    out["notes"] += peak_notes(out["peak_memory_bytes_per_rank"]["ranks"])
    if out["step_seconds"]["predicted"] and measured:
        out["step_seconds"]["error"] = measured / out["step_seconds"]["predicted"] - 1
    mem = out["memory_bytes"]
    if mem["measured_peak"]:
        mem["error"] = mem["measured_peak"] / mem["predicted_peak"] - 1
    elif not run.spec.is_moe and world_size == 1 and not cfg.precision.startswith("amp"):
        # no allocator statistics off CUDA: PyTorch's MemTracker measures the same step of
        # the reference model on fake tensors instead (profile.memory)
        fake = measure_step_memory(
            run.spec,
            micro_batch=cfg.micro_batch,
            seq_len=cfg.seq_len,
            precision=cfg.precision,
            optimizer=cfg.optimizer,
            recompute=cfg.recompute,
            device="fake-cpu",
        )
        mem["measured_peak_fake_tensors"] = fake.peak
        mem["error"] = fake.peak / mem["predicted_peak"] - 1
        out["notes"].append(
            "peak memory measured by torch's MemTracker on fake tensors (one step of the "
            "reference model, single-tensor optimizer): the CPU allocator keeps no statistics"
        )
    if state.last_loss is not None and math.isfinite(state.last_loss):
        out["perplexity_final"] = math.exp(state.last_loss)
    return out


ROW_BIAS = ("attn.proj.bias", "mlp.down.bias")
"""train.parallel.tensor_parallel's RowwiseParallel linears' biases (model.transformer's names)."""


def _local_bytes(p) -> int:
    local = p.to_local() if isinstance(p, DTensor) else p
    return local.numel() * local.element_size()


def _model_facts(run: Run) -> dict:
    """RunFacts' fields read off the model and the config (train.observe.comm_report's
    differences)."""
    cfg, params = run.cfg, dict(run.model.named_parameters())
    spec = run.spec
    tied = getattr(run.net, "tied_name", "") if getattr(run.net, "tie_group", None) else ""
    layout = expert_parallel.of(run.model)
    return {
        # this rank's tokens: each cp rank holds seq_len / cp of every sequence
        "tokens_per_micro_batch": cfg.micro_batch * cfg.seq_len // cfg.cp,
        "sequence_parallel": bool(cfg.sequence_parallel),
        "norm_grad_bytes": sum(_local_bytes(p) for n, p in params.items() if "norm" in n),
        "row_bias_bytes": sum(_local_bytes(p) for n, p in params.items() if n.endswith(ROW_BIAS)),
        "tied_grad_bytes": _local_bytes(params[tied]) if tied else 0,
        "stage_grad_bytes": sum(_local_bytes(p) for p in params.values()) if cfg.pp > 1 else 0,
        "n_stage_params": len(params) if cfg.pp > 1 else 0,
        "stages_per_rank": cfg.vpp if cfg.pp_schedule == "interleaved-1f1b" else 1,
        "n_experts": 0 if layout is None else spec.n_experts,
        "moe_layers": 0 if layout is None else spec.n_moe_layers,
        "capacity_factor": 0.0 if layout is None else spec.capacity_factor,
        "recompute": cfg.recompute,
    }


def run_comm(run: Run) -> dict:
    """comm.json's document for `run` (train.observe.comm_report); a collective: every rank calls
    it. Here, not beside the counter (train.observe.comm_count): the counter is part of the run's
    state, so what reads the whole run sits above both."""
    measured, same = gather_tallies(run.comm_counter, run.info)
    mesh = (
        {} if run.mesh is None else dict(zip(run.mesh.mesh_dim_names, run.mesh.shape, strict=True))
    )
    facts = RunFacts(
        strategy=run.cfg.strategy,
        mesh=mesh,
        grad_accum=run.cfg.grad_accum,
        param_shapes=tuple((tuple(p.shape), p.dtype.itemsize) for p in run.model.parameters()),
        **_model_facts(run),
    )
    return comm_document(
        measured,
        run.budget.predicted_collectives,
        facts,
        plan=run.budget.plan.describe(),
        counted_step=COUNTED_STEP if run.comm_counter.enabled else None,
        same_on_every_rank=same,
    )
