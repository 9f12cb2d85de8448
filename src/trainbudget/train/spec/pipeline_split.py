"""Which layers each pipeline stage holds and which stages each pipeline rank runs: pure (no
torch), so that preflight checks a split before anything is built and train.parallel.pipeline builds
the stages from the same answer.

A run with `pp` ranks per pipeline and `vpp` virtual stages per rank has S = pp * vpp stages,
numbered 0 .. S-1 along the model: stage 0 holds the embeddings and the first layers, stage S-1
the last layers, the final norm and the head. Stage s runs on pipeline rank s % pp, so rank r
runs stages r, r + pp, r + 2 pp, ... (the interleaved assignment of Narayanan et al. 2021,
"Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", arXiv
2104.04473, Sec. 2.2.2; torch.distributed.pipelining's ScheduleInterleaved1F1B expects the
same "loop" placement).
"""

from __future__ import annotations

from trainbudget.core.errors import SpecError

PP_SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b")
"""The trainer's schedule names (TrainConfig.pp_schedule)."""
SCHEDULE_CLASSES = {
    "gpipe": "ScheduleGPipe",
    "1f1b": "Schedule1F1B",
    "interleaved-1f1b": "ScheduleInterleaved1F1B",
}
"""The trainer's schedule name -> its class in torch.distributed.pipelining."""
CORE_SCHEDULES = {"gpipe": "gpipe", "1f1b": "1f1b", "interleaved": "interleaved-1f1b"}
"""The core's plan schedule name (core.parallel.plan.SCHEDULES) -> the trainer's."""


def parse_pp_layers(text: str) -> tuple[int, ...]:
    """ "3,5" -> (3, 5); "" -> () (an even split). SpecError on anything but positive
    integers separated by commas."""
    if not text.strip():
        return ()
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise SpecError(
            "pp_layers", text, "must be positive integers separated by commas (layers per stage)"
        )
    return tuple(int(p) for p in parts)


def stage_layer_counts(n_layers: int, *, pp: int, vpp: int = 1, pp_layers: str = "") -> tuple:
    """Layers of each of the pp * vpp stages, first to last: `pp_layers` as given (one entry
    per stage, summing to n_layers), or n_layers / (pp * vpp) each."""
    n_stages = pp * vpp
    counts = parse_pp_layers(pp_layers)
    if counts:
        if len(counts) != n_stages:
            raise SpecError(
                "pp_layers",
                pp_layers,
                f"must have one entry per stage: pp ({pp}) * vpp ({vpp}) = {n_stages}",
            )
        if sum(counts) != n_layers:
            raise SpecError(
                "pp_layers",
                pp_layers,
                f"sums to {sum(counts)}, not the model's n_layers ({n_layers})",
            )
        return counts
    if n_layers % n_stages:
        raise SpecError(
            "n_layers",
            n_layers,
            f"must be divisible by pp ({pp}) * vpp ({vpp}) = {n_stages} for an even split "
            "(or give pp_layers)",
        )
    return (n_layers // n_stages,) * n_stages


def stage_layers(n_layers: int, *, pp: int, vpp: int = 1, pp_layers: str = "") -> tuple:
    """The layer indices of each stage, first to last: a tuple of ranges."""
    ranges, start = [], 0
    for count in stage_layer_counts(n_layers, pp=pp, vpp=vpp, pp_layers=pp_layers):
        ranges.append(range(start, start + count))
        start += count
    return tuple(ranges)


def rank_stages(pp_rank: int, *, pp: int, vpp: int = 1) -> tuple[int, ...]:
    """The stages pipeline rank `pp_rank` runs: pp_rank, pp_rank + pp, ... (vpp of them)."""
    return tuple(pp_rank + k * pp for k in range(vpp))


def check_schedule(schedule: str, *, pp: int, vpp: int, n_microbatches: int) -> None:
    """torch.distributed.pipelining's rules for a schedule (torch 2.13, schedules.py):
    Schedule1F1B needs n_microbatches >= its stages; ScheduleInterleaved1F1B runs
    max(1, n_microbatches // pp) rounds and needs n_microbatches a multiple of them; the
    single-stage schedules take one stage per rank (vpp 1), the interleaved one two or more."""
    if schedule not in PP_SCHEDULES:
        raise SpecError("pp_schedule", schedule, "must be one of " + ", ".join(PP_SCHEDULES))
    if schedule == "interleaved-1f1b" and vpp < 2:
        raise SpecError("vpp", vpp, "must be >= 2 with pp_schedule interleaved-1f1b")
    if schedule != "interleaved-1f1b" and vpp != 1:
        raise SpecError("vpp", vpp, f"must be 1 with pp_schedule {schedule} (one stage per rank)")
    if pp == 1:
        return
    if schedule == "1f1b" and n_microbatches < pp:
        raise SpecError(
            "grad_accum",
            n_microbatches,
            f"must be >= pp ({pp}) with pp_schedule 1f1b (torch's Schedule1F1B: a micro-batch "
            "per stage at least)",
        )
    rounds = max(1, n_microbatches // pp)
    if schedule == "interleaved-1f1b" and n_microbatches % rounds:
        raise SpecError(
            "grad_accum",
            n_microbatches,
            f"must be a multiple of max(1, grad_accum // pp) = {rounds} with pp_schedule "
            "interleaved-1f1b (torch's ScheduleInterleaved1F1B runs that many rounds)",
        )


def pipeline_engine(
    schedule: str, *, pp: int, vpp: int, dp: int, dp_engine: str, tp: int = 1
) -> str:
    """What runs, in PyTorch's words (summary.json's `strategy_engine` with pp > 1); dp_engine
    is train.spec.strategy.engine_name's, tensor parallelism included."""
    name = SCHEDULE_CLASSES[schedule]
    stages = f"{pp * vpp} stages" + (f" ({vpp} per rank)" if vpp > 1 else "")
    axes = " x ".join(f"{axis}={n}" for axis, n in (("dp", dp), ("tp", tp)) if n > 1)
    wrapper = f"{dp_engine} per stage over {axes}" if axes else "no data-parallel wrapper"
    return f"torch.distributed.pipelining {name}, {stages}; {wrapper}"
