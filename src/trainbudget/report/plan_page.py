"""The plan report page: the question and its answer in one line, then memory, step time,
scaling, roofline, failures and assumptions, each a chart with its numbers in a table."""

from __future__ import annotations

from trainbudget.core.units import GB, TB, format_bytes, format_count, format_seconds
from trainbudget.report.figures import Chart
from trainbudget.report.page import Raw, bullets, document, esc, figure, paragraph, table
from trainbudget.report.plan_data import PlanReport

TFLOPS = 1e12
GFLOP = 1e9


def headline(r: PlanReport) -> tuple[str, str]:
    """(question, answer), one line each; also the page's title and first lines."""
    question = (
        f"Train {r.model} ({format_count(r.n_params)} parameters) on {format_count(r.tokens)} "
        f"tokens with {r.n_gpus:,} x {r.gpu}, global batch {r.global_batch} x {r.seq_len} "
        f"tokens, {r.precision}, {r.optimizer}, framework {r.framework}: how long, at what "
        "cost, in which layout?"
    )
    a = r.answer
    cost = f" (cost {a.cost:,.0f})" if a.cost is not None else ""
    answer = (
        f"{a.train_days:.2f} days and {a.gpu_hours:,.0f} GPU-hours{cost} on {r.n_gpus:,} x "
        f"{r.gpu} in {a.plan}: {a.step_seconds:.4g} s per step, {a.tokens_per_second:,.0f} "
        f"tokens/s, MFU {a.mfu:.1%}"
    )
    if not a.fits:
        answer = (
            f"No layout fits in {format_bytes(r.gpu_memory_bytes)} per GPU; the one needing "
            f"least memory, {a.plan}, would take {a.train_days:.2f} days"
        )
    return question, answer


def _candidates(r: PlanReport) -> Raw:
    rows = [
        (
            c.rank,
            c.plan,
            "yes" if c.fits else "NO",
            f"{c.total_memory_bytes / GB:.1f}",
            f"{c.step_seconds:.4g}",
            f"{c.step_seconds_by_part['compute']:.3g}",
            f"{c.step_seconds_by_part['exposed_comm']:.3g}",
            f"{c.step_seconds_by_part['pipeline_bubble']:.3g}",
            f"{c.step_seconds_by_part['optimizer'] + c.step_seconds_by_part['offload']:.3g}",
            f"{c.tokens_per_second:,.0f}",
            f"{c.mfu:.1%}",
        )
        for c in r.candidates
    ]
    headers = (
        "#",
        "plan",
        "fits",
        "memory GB",
        "step s",
        "compute s",
        "exposed comm s",
        "bubble s",
        "optimizer + offload s",
        "tokens/s",
        "MFU",
    )
    return table(headers, rows, numeric=3)


def _scaling(r: PlanReport) -> Raw:
    rows = [
        (
            f"{p.n_gpus:,}",
            p.plan,
            f"{p.train_days:,.0f}" if p.train_days >= 100 else f"{p.train_days:.3g}",
            f"{p.gpu_hours:,.0f}",
            f"{p.cost:,.0f}" if p.cost is not None else "-",
            f"{p.tokens_per_second:,.0f}",
            f"{p.mfu:.1%}",
            f"{p.scaling_efficiency:.0%}",
        )
        for p in r.scaling
    ]
    headers = ("GPUs", "best plan", "days", "GPU-hours", "cost", "tokens/s", "MFU", "efficiency")
    shown = table(headers, rows, numeric=2) if rows else ""
    skipped = paragraph("Not shown: " + "; ".join(r.scaling_skipped), "muted")
    return Raw(shown + (skipped if r.scaling_skipped else ""))


def _roofline(r: PlanReport) -> Raw:
    rf = r.roofline
    rows = [
        (
            o.name,
            f"({o.rows:,.0f}, {o.k:,.0f}) @ ({o.k:,.0f}, {o.n:,.0f})",
            f"{o.flops / GFLOP:,.1f}",
            f"{o.intensity_flops_per_byte:,.0f}",
            f"{o.achieved_flops_per_second / TFLOPS:,.1f}",
            "compute" if o.compute_bound else "memory",
        )
        for o in rf.ops
    ]
    headers = ("op", "shape (tokens, in) @ (in, out)", "GFLOP", "FLOP/byte", "TFLOP/s", "bound")
    text = (
        f"{rf.gpu} {rf.dtype}: peak {rf.peak_flops_per_second / TFLOPS:,.1f} TFLOP/s, HBM "
        f"{rf.hbm_bytes_per_second / TB:.3g} TB/s, ridge {rf.ridge_flops_per_byte:.0f} FLOP/byte "
        f"({rf.achievable_ridge_flops_per_byte:.0f} at the achievable efficiencies)."
    )
    if rf.measured is not None:
        if rf.measured_flops_per_second is not None:
            text += (
                f" Measured by {rf.measured.source} on {rf.measured.device_name}: "
                f"{rf.measured_flops_per_second / TFLOPS:,.1f} TFLOP/s matmul, "
                f"{rf.measured.bandwidth_bytes_per_second / TB:.3g} TB/s copy, ridge "
                f"{rf.measured_ridge_flops_per_byte:.0f} FLOP/byte."
            )
        else:
            text += f" {rf.measured.source} has no {rf.dtype} matmul figure."
    return Raw(paragraph(text) + table(headers, rows, numeric=2))


def _failures(r: PlanReport, charts: dict[str, Chart]) -> Raw:
    f = r.failures
    if f is None:
        return paragraph(f"No failure figures: {r.failures_problem}", "muted")
    rows = [
        ("GPU failure probability per day", f"{f.gpu_failure_rate_per_day:.3g}"),
        ("job failure probability per day", f"{f.job_failure_probability_per_day:.1%}"),
        ("job MTBF", format_seconds(f.mtbf_seconds)),
        ("checkpoint size", format_bytes(f.checkpoint_bytes)),
        (
            "checkpoint write",
            f"{format_seconds(f.checkpoint_write_seconds)} at "
            f"{format_bytes(f.write_bytes_per_second)}/s",
        ),
        ("restart after a failure", format_seconds(f.restart_seconds)),
        ("checkpoint interval (Daly 2006)", format_seconds(f.daly_interval_seconds)),
        ("checkpoint interval (Young 1974)", format_seconds(f.young_interval_seconds)),
        ("goodput", f"{f.goodput:.2%}"),
        ("lost per failure", format_seconds(f.waste_per_failure_seconds)),
        ("failure-free training", f"{f.useful_days:.2f} days"),
        ("wall-clock training", f"{f.wall_clock_days:.2f} days"),
        ("expected failures", f"{f.expected_failures:.0f}"),
    ]
    chart = figure(charts["failures"], "Goodput at other checkpoint intervals, same job.")
    return Raw(chart + table(("quantity", "value"), rows))


def plan_page(r: PlanReport, charts: dict[str, Chart]) -> str:
    question, answer = headline(r)
    a = r.answer
    header = [
        Raw(f"<h1>{esc(r.model)} on {r.n_gpus:,} x {esc(r.gpu)}: training plan</h1>"),
        Raw(f'<p class="question" id="question">{esc(question)}</p>'),
        Raw(f'<p class="answer{"" if a.fits else " warn"}" id="answer">{esc(answer)}</p>'),
        paragraph(
            f"{a.evaluated:,} layouts evaluated, {a.n_fitting:,} fit in "
            f"{format_bytes(r.gpu_memory_bytes)} (the best plan's allocated peak at most "
            f"{format_bytes(r.memory_limit_bytes)}: its {r.fits_rule}, the device giving "
            f"{format_bytes(r.device_memory_bytes)}). Why this one: "
            f"{a.why}.",
            "muted",
        ),
    ]
    sections = [
        ("candidates", "Candidate layouts", _candidates(r)),
        (
            "memory",
            "Memory per GPU",
            figure(charts["memory"], "Each bar: one GPU of the most loaded pipeline stage."),
        ),
        (
            "step-time",
            "Step time",
            figure(
                charts["step_time"],
                "Communication hidden behind compute is not drawn; what remains exposed is.",
            ),
        ),
    ]
    scaling = paragraph("No GPU count of the curve has a layout that fits.", "muted")
    if "scaling" in charts:
        scaling = figure(
            charts["scaling"],
            "Efficiency = the least GPU-hours of any count shown / GPU-hours at this count.",
        )
    sections.append(("scaling", "Scaling with the number of GPUs", scaling + _scaling(r)))
    sections += [
        (
            "roofline",
            "Roofline",
            figure(charts["roofline"], "Points: where the step-time model places each matmul.")
            + _roofline(r),
        ),
        (
            "failures",
            "Failures and checkpoints",
            _failures(r, charts),
        ),
        ("assumptions", "Assumptions", bullets(r.assumptions, "assumptions")),
    ]
    return document(f"trainbudget report: {r.model} on {r.n_gpus:,} x {r.gpu}", header, sections)
