"""A plan's derivation for `--explain`: tokens per step, each exposed term of the step, MFU,
communication per axis and memory per GPU, each as formula = value from the evaluated plan."""

from __future__ import annotations

from trainbudget.core.parallel.search.planner import RankedPlan
from trainbudget.core.single.estimate import Step
from trainbudget.core.units import SECONDS_PER_DAY, format_bytes


def plan_steps(r: RankedPlan, seq_len: int, tokens: float | None = None) -> list[Step]:
    """The plan's figures, each derived from the terms the step and memory models return."""
    return [*_time_steps(r, seq_len, tokens), *_comm_steps(r), *_memory_steps(r)]


def _time_steps(r: RankedPlan, seq_len: int, tokens: float | None) -> list[Step]:
    p, t = r.plan, r.time
    terms = {k: v for k, v in t.breakdown_seconds.items() if v > 0}
    out = [
        Step(
            "tokens / step",
            f"micro-batch {p.micro_batch} x accumulation {p.grad_accum} x dp {p.dp} x {seq_len}",
            f"{t.tokens_per_step:,}",
        ),
        Step(
            "compute / step",
            "matmuls, attention and memory-bound ops of every micro-batch on the slowest stage",
            f"{t.compute_seconds:.4g} s",
        ),
        Step(
            "step time",
            "exposed terms: " + " + ".join(f"{k} {v:.4g}" for k, v in terms.items()),
            f"{t.step_seconds:.4g} s (bounds {t.lower_bound_seconds:.4g}-"
            f"{t.upper_bound_seconds:.4g} s: everything hidden / nothing hidden)",
        ),
        Step(
            "MFU",
            f"model FLOPs/step {t.model_flops_per_step:.4g} / ({t.step_seconds:.4g} s x "
            f"{t.n_gpus} GPUs x {t.peak_flops_per_second:.4g})",
            f"{100 * t.mfu:.1f} % (HFU {100 * t.hfu:.1f} %: recomputation counted)",
        ),
    ]
    if tokens is not None:
        seconds = tokens / t.tokens_per_second
        out.append(
            Step(
                "time",
                f"{tokens:.4g} tokens / ({t.tokens_per_step:,} tokens / {t.step_seconds:.4g} s)",
                f"{seconds:.5g} s = {seconds / SECONDS_PER_DAY:.2f} days",
            )
        )
    return out


def _comm_steps(r: RankedPlan) -> list[Step]:
    t = r.time
    sent = {k: v for k, v in t.comm_bytes.items() if v > 0}
    if not sent:
        return []
    return [
        Step(
            "communication / step",
            " + ".join(
                f"{k} {format_bytes(v)} in {t.comm_seconds.get(k, 0.0):.3g} s"
                for k, v in sent.items()
            ),
            t.overlap_note,
        )
    ]


def _memory_steps(r: RankedPlan) -> list[Step]:
    m = r.memory
    out = [
        Step(
            "memory / GPU",
            f"weights {format_bytes(m.params_bytes)} + grads {format_bytes(m.grads_bytes)} + "
            f"optimizer {format_bytes(m.optimizer_bytes)} + activations "
            f"{format_bytes(m.activations_bytes)} + buffers {format_bytes(m.buffers_bytes)}",
            f"{format_bytes(m.total_bytes)} on the {m.stage} stage",
        )
    ]
    if len(r.stage_memory_bytes) > 1:
        out.append(
            Step(
                "memory / stage",
                ", ".join(f"{k} {format_bytes(v)}" for k, v in r.stage_memory_bytes.items()),
                f"heaviest: {m.stage}",
            )
        )
    if m.host_bytes:
        out.append(
            Step(
                "offloaded",
                "optimizer state (or parameters) in host memory",
                format_bytes(m.host_bytes),
            )
        )
    return out
