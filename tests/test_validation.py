"""Predicted step times against published training runs (docs/validation.md).

The issue's target: mean absolute error under 10 % on measured step times, with one set of
efficiency constants for every run. Sources and assumptions per run are in
trainbudget/published/ (the records themselves are tested in tests/published/).
"""

from __future__ import annotations

import dataclasses

import pytest

from clirun import cli, cli_json
from modern_runs import ITEM6, NEW
from published_cli import estimate_args as _cli_args
from trainbudget.core.parallel.fits import in_measure
from trainbudget.core.single.params import count_params
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.published import PUBLISHED_RUNS, get_run
from trainbudget.published.record import Layout
from trainbudget.validation import (
    BREAKDOWN_KEYS,
    EXCLUDED,
    OUTLIERS,
    Comparison,
    breakdown,
    compare,
    compare_all,
    framework_row,
    layout_family,
    leave_one_source_out,
    mean_absolute_error,
    measured_step_seconds,
    megatron_flops,
    memory_error,
    outliers,
    plan_of,
    scored,
    with_memory,
)


def test_every_run_is_a_consistent_layout():
    for run in PUBLISHED_RUNS:
        plan = plan_of(run)
        assert plan.n_gpus == run.n_gpus, run.id
        assert plan.global_batch == run.layout.global_batch, run.id


# Narayanan et al. 2021 Table 2, "ZeRO-3 without Model Parallelism": DeepSpeed 0.3's first
# ZeRO-3 (framework row deepspeed-2021), 2-4x slower than the same runs' compute. Their step
# times are not misreads: the table's own last column, "Training time for 300B tokens (days)",
# follows from them (test below).
ZERO3_2021 = {
    f"narayanan-{size}-zero3-{n}gpu": days
    for size, points in (
        ("175b", {384: 90, 768: 74, 1536: 74}),
        ("530b", {640: 169, 1120: 137, 2240: 140}),
    )
    for n, days in points.items()
}


def test_mean_absolute_error_on_each_era():
    """The scored MAE: on the 2021-2024 sources the model was built on, 10.7 % while the ZeRO-3
    rows of Narayanan et al. Table 2 were timed with overlapped per-layer gathers (they were
    -30 % to -71 %), 6.6 % with DeepSpeed 0.3's tensor-by-tensor collectives and Megatron-LM's
    pipeline scatter/gather (the legacy rows), 6.1 % with today's kernel mechanisms. The
    newer sources (tests/modern_runs.py: H100/B200, FP8, long context, nanotron's sweep), on
    which nothing was fitted, 17.4 % (30.5 % before those mechanisms); all 129: 11.5 %. Issue
    "Right on runs nobody tuned for" asks for 5 %: not reached (its notes). Its item 6 added
    50 runs from six more sources (tests/modern_runs.py ITEM6: 16.6 %); all 179: 12.9 %."""
    comparisons = scored(compare_all())
    newer = {r.id for r in NEW}
    assert mean_absolute_error([c for c in comparisons if c.run_id not in newer]) < 0.07
    assert mean_absolute_error(comparisons) < 0.13
    zero3 = [c for c in comparisons if c.run_id in ZERO3_2021]
    assert len(zero3) == 6 and all(abs(c.error) < 0.25 for c in zero3)


@pytest.mark.parametrize(
    "run",
    [r for r in PUBLISHED_RUNS if r.id not in EXCLUDED and not r.gpu.startswith("other:")],
    ids=lambda r: r.id,
)
def test_each_run_converts_and_is_within_a_factor(run):
    """Every scored row gives a step time, within 50 % of the prediction: a wrong unit or a
    misread column (samples for tokens, per-GPU for global) is off by far more. Beyond it only
    with an OUTLIERS entry (nanotron's sweep at 64 nodes: its own MFU falls to 5 %, a
    regime, not a misread: tests/published/test_modern_runs.py re-reads the figure)."""
    c = compare(run)
    assert c is not None
    assert abs(c.error) < 0.50 or run.id in OUTLIERS, f"{run.id}: {100 * c.error:+.1f} %"


@pytest.mark.parametrize(("run_id", "days"), ZERO3_2021.items())
def test_zero3_step_times_reproduce_the_tables_training_days(run_id, days):
    # Table 2: days for 300B tokens = 300e9 / (batch * 2048) iterations x seconds each; within
    # 1 %, the paper's rounding of its TFLOP/s (the 530B rows give 136.2 and 139.0 for 137, 140)
    run = get_run(run_id)
    iterations = 300e9 / (run.layout.global_batch * run.seq_len)
    assert iterations * measured_step_seconds(run) / 86400 == pytest.approx(days, rel=0.01)


def test_every_scored_run_beyond_the_limit_is_explained():
    """Issue 12: no scored run beyond +-15 % without an entry in OUTLIERS (which may say
    'unexplained: ...'); every entry names a scored run."""
    counted = scored(compare_all())
    missing = [(c.run_id, f"{100 * c.error:+.1f} %") for c, why in outliers(counted) if not why]
    assert not missing, f"add to validation.OUTLIERS: {missing}"
    assert set(OUTLIERS) <= {c.run_id for c in counted}
    assert all(why.strip() for why in OUTLIERS.values())


def test_bloom_log_line_reproduces_its_tflops():
    # tr11-176B-ml README log line: "elapsed time per iteration (s): 104.70 | ... | TFLOPs:
    # 149.77" with 96Bslh^2(1 + s/6h + V/16lh), V = 250,880, on 384 GPUs
    run = get_run("bloom-176b-384gpu")
    tflops = megatron_flops(run, 4) / (104.70 * 384) / 1e12
    assert tflops == pytest.approx(149.77, rel=1e-3)
    assert measured_step_seconds(run) == 104.70


def test_samples_per_gpu_become_a_step_time():
    # Zero Bubble Table 4, 1F1B, 1.5B, 24 micro-batches of 6 on 8 GPUs: 11.8 samples/GPU/s
    run = get_run("zero-bubble-1f1b-1.5b-m24")
    assert measured_step_seconds(run) == pytest.approx(6 * 24 / (11.8 * 8))


def test_flash_attention2_tflops_use_its_formula():
    # FlashAttention-2 §4.2: 6 * seqlen * params + 12 * layers * hidden * seqlen^2 per
    # sequence; Table 1: GPT3-2.7B 8k context at 225 TFLOPs/s on each of 8 A100s
    run = get_run("flashattn2-gpt3-2.7b-8k")
    s, m = 8192, run.model
    per_seq = 6 * s * count_params(m).total + 12 * 32 * 2560 * s * s
    expected = run.layout.global_batch * per_seq / (225e12 * 8)
    assert measured_step_seconds(run) == pytest.approx(expected)


def test_memory_is_compared_where_a_source_reports_it():
    memory = with_memory(scored(compare_all()))
    assert {c.run_id.rsplit("-", 1)[0] for c in memory if c.run_id.startswith("zero-b")} == {
        "zero-bubble-1f1b-1.5b",
        "zero-bubble-1f1b-6.2b",
        "zero-bubble-1f1b-14.6b",
        "zero-bubble-1f1b-28.3b",
    }
    assert {c.source_key for c in memory} == {
        "qi-2024-zero-bubble", "huggingface-nanotron-bench",
        "karpathy-nanochat", "bekman-ml-engineering", "baai-flagperf",  # issue 23 item 6
        "kempner-forge-mfu",
    }  # fmt: skip
    # Table 4, 1F1B, 1.5B: "Memory (GB) 30 30 30"
    (first,) = [c for c in memory if c.run_id == "zero-bubble-1f1b-1.5b-m24"]
    assert first.measured_memory_bytes == 30e9
    for c in memory:  # each row in its own measure (core.parallel.fits.in_measure)
        predicted = in_measure(c.predicted_memory_bytes, c.memory_measure, c.n_communicators)
        assert memory_error(c) == pytest.approx(predicted / c.measured_memory_bytes - 1)
        if c.memory_measure == "allocated":
            assert memory_error(c) == c.predicted_memory_bytes / c.measured_memory_bytes - 1
    with pytest.raises(ValueError, match="reports no memory"):
        memory_error(_fake("a1", "a", 0.0))


def test_memory_where_reported_is_within_eight_percent():
    """Issue "Numbers you can trust": memory within 8 % where a source reports it. Qi et al.
    2024, Table 4 (1F1B rows: 30, 39, 32, 43 GB) against the core's heaviest stage, with
    Megatron's default dropout masks (ModelSpec.dropout): without them the 1.5B model's
    stage came out 35.7 % low (19.3 GB)."""
    memory = with_memory(scored(compare_all()))
    errors = {c.run_id: memory_error(c) for c in memory if c.source_key == "qi-2024-zero-bubble"}
    assert len(errors) == 12
    assert max(abs(e) for e in errors.values()) < 0.08, errors
    # nanotron's sweep states a peak whose definition (allocated or reserved) it does not
    # give (its record marks it assumed): 19.5 % off on average, the model lower in 24 of 26
    nanotron = [memory_error(c) for c in memory if c.source_key == "huggingface-nanotron-bench"]
    assert len(nanotron) == 26 and sum(map(abs, nanotron)) / 26 < 0.20


# ---- breakdowns ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(BREAKDOWN_KEYS))
def test_breakdown_counts_and_averages_add_up(name):
    counted = scored(compare_all())
    groups = breakdown(counted, BREAKDOWN_KEYS[name])
    assert sum(g.n_runs for g in groups) == len(counted)
    assert len({g.name for g in groups}) == len(groups)
    weighted = sum(g.n_runs * g.mean_absolute_error for g in groups) / len(counted)
    assert weighted == pytest.approx(mean_absolute_error(counted))


def test_data_parallel_share_bands_the_step_by_what_its_data_parallel_axis_moves():
    """A run without data parallelism moves nothing on that axis; ZeRO-3 on 1,536 A100s with one
    micro-batch (Narayanan et al. 2021, Table 3) gathers and reduces most of its step."""
    key = BREAKDOWN_KEYS["data-parallel communication"]
    alone = compare(get_run("korthikanti-22b-full"))
    zero3 = compare(get_run("narayanan-175b-zero3-1536gpu"))
    assert alone.dp_comm_share == 0 and key(alone) == "< 3 %"
    assert zero3.dp_comm_share > 0.3 and key(zero3) == ">= 30 %"


def test_breakdown_groups_by_key_in_first_seen_order():
    cs = [_fake("a1", "a", 0.1), _fake("b1", "b", -0.3), _fake("a2", "a", -0.2)]
    (a, b) = breakdown(cs, lambda c: c.source_key)
    assert (a.name, a.n_runs, b.name, b.n_runs) == ("a", 2, "b", 1)
    assert a.mean_absolute_error == pytest.approx(0.15)
    assert a.mean_error == pytest.approx(-0.05)


@pytest.mark.parametrize(
    ("axes", "family"),
    [
        ({}, "dp only"),
        ({"zero": 3}, "zero3/fsdp"),
        ({"tp": 8}, "tp"),
        ({"tp": 8, "pp": 4}, "tp+pp"),
        ({"tp": 8, "pp": 4, "cp": 2}, "tp+pp+cp"),
        ({"pp": 8}, "pp"),
        ({"tp": 8, "zero": 3}, "tp+zero3/fsdp"),
    ],
)
def test_layout_family(axes, family):
    base = dict(tp=1, pp=1, dp=8, sp=False, recompute="none", zero=1, micro_batch=1)
    lay = Layout(**{**base, **axes, "global_batch": 8, "flash_attention": True})
    assert layout_family(lay) == family


# ---- leave one source out --------------------------------------------------------------------


def _fake(run_id: str, source: str, error: float) -> Comparison:
    return Comparison(
        run_id=run_id,
        source_key=source,
        framework="other",
        gpu_generation="A100",
        layout_family="dp only",
        n_gpus=8,
        layout="dp8",
        measured_seconds=1.0,
        predicted_seconds=1.0 + error,
        predicted_memory_bytes=1.0,
        gpu_memory_bytes=1.0,
    )


def _grid_world(held_errors: dict[float, float]):
    """Source 'a' fits best at 0.6 (its own error is held_errors[v]); 'b' and 'c' fit best at
    0.7. comparisons_at(v) plays compare_all(Efficiency(matmul=v))."""
    others = {0.6: 0.30, 0.7: 0.01}

    def at(v: float) -> list[Comparison]:
        return [
            _fake("a1", "a", held_errors[v]),
            _fake("b1", "b", others[v]),
            _fake("c1", "c", -others[v]),
        ]

    return at


def test_leave_one_source_out_fits_without_the_held_source():
    loso = leave_one_source_out(grid=(0.6, 0.7), comparisons_at=_grid_world({0.6: 0.0, 0.7: 0.5}))
    # a's own runs would pick 0.6 (error 0); held out, b and c choose 0.7, where a errs by 50 %
    assert loso.chosen["a"] == 0.7
    assert loso.errors["a1"] == pytest.approx(0.5)
    # holding out b leaves a (best at 0.6) and c (best at 0.7): 0.6 -> (0 + .3)/2, 0.7 ->
    # (.5 + .01)/2, so 0.6
    assert loso.chosen["b"] == 0.6
    assert loso.errors["b1"] == pytest.approx(0.30)
    assert set(loso.errors) == {"a1", "b1", "c1"}


def test_the_held_out_source_never_moves_its_own_fit():
    """However badly or well source a's runs fit each grid value, a's chosen value is the
    same: it is fitted on b and c alone."""
    for held in ({0.6: 0.0, 0.7: 0.9}, {0.6: 0.9, 0.7: 0.0}, {0.6: 5.0, 0.7: 5.0}):
        loso = leave_one_source_out(grid=(0.6, 0.7), comparisons_at=_grid_world(held))
        assert loso.chosen["a"] == 0.7


def test_leave_one_source_out_skips_excluded_runs():
    def at(v: float) -> list[Comparison]:
        return [_fake("llama3-405b-8k-8192gpu", "x", 9.0), _fake("a1", "a", v), _fake("b1", "b", v)]

    loso = leave_one_source_out(grid=(0.1, 0.2), comparisons_at=at)
    assert set(loso.errors) == {"a1", "b1"} and "x" not in loso.chosen


def test_leave_one_source_out_covers_every_scored_run():
    counted = scored(compare_all())
    loso = leave_one_source_out()
    assert set(loso.errors) == {c.run_id for c in counted}
    assert set(loso.chosen) == {c.source_key for c in counted}


def test_a_comparison_depends_on_its_run_alone():
    """compare() depends on the run alone: a comparison is the same with or without the rest."""
    run = get_run("narayanan-1t-3072gpu")
    alone = compare(run)
    (together,) = [c for c in compare_all() if c.run_id == run.id]
    assert dataclasses.asdict(alone) == dataclasses.asdict(together)


def test_validate_command():
    j = cli_json("validate")
    assert j["scored"] >= 40
    assert set(j["breakdown"]) == set(BREAKDOWN_KEYS)
    assert "leave_one_source_out_mean_absolute_error" in j
    assert sum(g["n_runs"] for g in j["breakdown"]["source"]) == j["scored"]
    assert {o["id"] for o in j["outliers"]} <= set(OUTLIERS)
    code, out, _ = cli("validate", "--markdown")
    assert code == 0 and out.startswith("| run |") and "### Step-time error by source" in out
    assert "### Scored runs beyond +-15 %" in out
    code, out, _ = cli("validate")
    last = out.strip().splitlines()[-1]
    assert last.startswith("mean absolute error over") and "leave-one-source-out" in last


@pytest.mark.parametrize(
    ("run_id", "errors"),
    [
        ("narayanan-7.5b-128gpu", {2: 0.063, 4: 0.024}),
        ("narayanan-18b-256gpu", {2: 0.107, 4: 0.042}),
    ],
)
def test_table1_errors_rest_on_the_assumed_micro_batch(run_id, errors):
    """validation.OUTLIERS quotes these: Narayanan et al. Table 1 gives no micro-batch (1 is
    assumed); at 4 the two tp-only rows beyond 15 % come within 5 %."""
    run = get_run(run_id)
    assert "layout.micro_batch" in run.assumed
    for micro, error in errors.items():
        other = dataclasses.replace(run, layout=dataclasses.replace(run.layout, micro_batch=micro))
        assert compare(other).error == pytest.approx(error, abs=0.001)


def test_bloom_is_timed_on_its_own_network():
    """BLOOM's Jean Zay nodes have 4 x 100 Gb/s Omni-Path (6.25 GB/s a GPU), not the catalog
    row's 200 Gb/s HDR NIC a GPU: the record states it (PublishedRun.nic_bytes_per_second) and
    compare() times the run on it, -9 %; on the catalog row's network it would be -14 %."""
    run = get_run("bloom-176b-384gpu")
    assert "Omni-Path" in run.notes and run.nic_bytes_per_second == 4 * 100e9 / 8 / 8
    assert compare(run).error == pytest.approx(-0.093, abs=0.005)
    catalog = dataclasses.replace(run, nic_bytes_per_second=None)
    assert compare(catalog).error == pytest.approx(-0.143, abs=0.005)


_CLI_RUNS = [r for r in PUBLISHED_RUNS if compare(r) is not None]


def test_every_run_validate_times_is_stated_on_the_command_line():
    """The protocol below covers every run `validate` compares: none is left out because the
    CLI cannot say its model, kernels or network."""
    assert len(_CLI_RUNS) == len(compare_all()) > 200


@pytest.mark.parametrize("run", _CLI_RUNS, ids=lambda r: r.id)
def test_validate_scores_the_model_the_cli_runs_by_default(run):
    """`validate` times and sizes each run as `estimate` does with what the source states and
    no other flag (a decoder's causal mask is both's default), so the errors it reports are
    the CLI's. The peak is the step's (start-up's high-water mark is the run's code:
    PublishedRun.whole_model_on_gpu_at_init)."""
    out = cli_json("estimate", *_cli_args(run))
    assert out["step_seconds"] == pytest.approx(compare(run).predicted_seconds, rel=1e-12)
    step_only = dataclasses.replace(run, whole_model_on_gpu_at_init=False)
    predicted = compare(step_only).predicted_memory_bytes
    assert out["memory_bytes"]["total"] == pytest.approx(predicted, rel=1e-12)
    # the data-parallel share validate groups by is the CLI's collectives over its step
    dp = sum(v for k, v in out["comm_seconds_per_step"].items() if k.startswith(("dp_", "zero3")))
    assert compare(run).dp_comm_share == pytest.approx(dp / out["step_seconds"], rel=1e-12)


def test_validate_counts_the_completed_runs_predicted_not_to_fit():
    """Every scored run completed, so each should be predicted to fit. Issue "Right on runs
    nobody tuned for" asks for 95 %: the default rule (the device rule, its margin the median
    measured / predicted of the framework row's other sources, against the memory CUDA gives
    the process) reaches it, and `validate` names the rest. The flat 90 % rule, now also on
    the device total, keeps its ratchet."""
    from trainbudget.core.parallel.fits import MARGIN_PERCENTILE
    from trainbudget.uncertainty import predicted_not_to_fit_with_measured_error
    from trainbudget.validation import predicted_not_to_fit

    counted = scored(compare_all())
    rejected = predicted_not_to_fit_with_measured_error(counted, MARGIN_PERCENTILE)
    assert len(counted) - len(rejected) >= 0.95 * len(counted)
    flat = predicted_not_to_fit(counted)
    assert all(c.predicted_memory_bytes > 0.9 * c.gpu_memory_bytes for c in flat)
    # the flat ratchet on the rows it was set on (see git history for each run's reason)
    item6 = {r.id for r in ITEM6}
    assert len([c for c in flat if c.run_id not in item6]) <= 19
    assert len([c for c in flat if c.run_id in item6]) <= 2
    out = cli_json("validate")
    assert out["predicted_not_to_fit"] == [c.run_id for c in rejected]
    _, text, _ = cli("validate")
    assert f"completed runs predicted to fit: {len(counted) - len(rejected)} of" in text


def test_a_runs_loss_kernel_is_the_one_validate_sizes():
    """A run whose source turns on Liger's fused linear cross-entropy is sized with it, not
    with its framework row's torch cross-entropy (which holds the 128K-vocabulary logits, the
    fp32 log-probabilities and two fp32 gradients: more than three times the peak at 64K), and
    timed with it: the same head GEMMs, without the 16 fp32 bytes per logit (loss_time)."""
    run = get_run("mleng-llama31-8b-h200-64k")
    row = framework_row(run.framework, run.attention_kernel, run.loss_kernel)
    assert row.loss_kernel == "fused-linear-cross-entropy" and row.attention_kernel == "flash3"
    torch_ce = compare(dataclasses.replace(run, loss_kernel=None))
    assert torch_ce.predicted_memory_bytes > 3 * compare(run).predicted_memory_bytes
    logits = run.seq_len * run.model.vocab_size  # one sequence a GPU, no TP
    fp32_bytes = logits * 16 / (get_hardware(run.gpu).hbm_bytes_per_second * 0.85)
    assert torch_ce.predicted_seconds - compare(run).predicted_seconds == pytest.approx(fp32_bytes)
