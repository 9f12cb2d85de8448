"""Issue 13, points 8, 9, 11 and 12, each reproduced at the command line: options that were
silently accepted, a traceback after a finished benchmark, README table commands that failed,
and error wording that named the wrong kind of quantity or printed `= None`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clirun import cli, cli_json, one_line_error

ROOT = Path(__file__).resolve().parents[2]
GPT2 = ("estimate", "--model", "gpt2")


def _calibration(folder: Path, **changes: object) -> Path:
    """A calibration file as `bench --save-calibration` writes it, for an H100 SXM."""
    doc = {
        "format": "trainbudget-calibration",
        "version": 1,
        "device_name": "NVIDIA H100 80GB HBM3",
        "catalog_key": "h100-sxm",
        "matmul_fraction_of_peak": {"bf16": 0.5},
        "hbm_fraction_of_peak": 0.9,
        "best_flops_per_second": {"bf16": 4.9e14},
        "bandwidth_bytes_per_second": 3.0e12,
        **changes,
    }
    path = folder / "cal.json"
    path.write_text(json.dumps(doc))
    return path


# ---- point 8: silent accepts ----------------------------------------------------------------


def _bad_calibration(tmp_path: Path, kind: str) -> Path:
    if kind == "missing":
        return tmp_path / "no-such.json"
    if kind == "folder":
        return tmp_path
    path = tmp_path / f"{kind}.json"
    if kind == "binary":
        path.write_bytes(bytes(range(128, 256)))  # no UTF-8 text starts with 0x80
    elif kind == "not-json":
        path.write_text("{format: trainbudget")
    else:  # valid JSON, wrong schema
        path.write_text(json.dumps({"format": "something-else"}))
    return path


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("missing", "no such file"),
        ("folder", "is a folder"),
        ("binary", "is a binary file"),
        ("not-json", "is not JSON"),
        ("wrong-schema", 'not a "trainbudget-calibration" file'),
    ],
)
def test_a_bad_calibration_file_is_refused_without_layout_flags(tmp_path, kind, says) -> None:
    path = _bad_calibration(tmp_path, kind)
    line = one_line_error((*GPT2, "--calibration", str(path)))
    assert "calibration" in line and repr(str(path)) in line and says in line


def test_a_calibration_alone_is_used_by_estimate(tmp_path) -> None:
    """--calibration is a plan option: alone, it switches estimate to the plan-aware step time
    and its measured matmul efficiency (0.5, below the default 0.7) slows the step."""
    argv = ("estimate", "--model", "llama-2-7b", "--gpus", "8", "--seq-len", "4096")
    calibrated = cli_json(*argv, "--calibration", str(_calibration(tmp_path)))
    default = cli_json(*argv, "--zero", "0")  # the same plan without the calibration
    assert calibrated["plan"] == default["plan"]
    assert calibrated["step_seconds"] > default["step_seconds"]


def test_a_calibration_from_another_gpu_is_refused_without_layout_flags(tmp_path) -> None:
    argv = ("estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb")
    line = one_line_error((*argv, "--calibration", str(_calibration(tmp_path))))
    assert "not on a100-80gb" in line


@pytest.mark.parametrize("pp", [None, "1"])
def test_virtual_stages_without_a_pipeline_are_refused(pp) -> None:
    argv = ("estimate", "--model", "llama-2-7b", "--vpp", "2")  # 32 layers: 2 divides them
    line = one_line_error(argv if pp is None else (*argv, "--pp", pp))
    assert "vpp (2) > 1 needs pp > 1" in line


@pytest.mark.parametrize(
    "argv",
    [
        GPT2,
        ("estimate", "--model", "llama-3-8b", "--gpus", "8"),
        (*GPT2, "--gpus", "8", "--tp", "2"),
    ],
    ids=["one-gpu", "planner", "layout"],
)
def test_explain_with_json_carries_the_derivation(argv) -> None:
    """--explain --json dropped the derivation silently: it is now a list of the steps the text
    prints, each quantity = formula = value."""
    j = cli_json(*argv, "--explain")
    steps = j["derivation"]
    assert steps and all(set(s) == {"quantity", "formula", "value"} for s in steps)
    _, text, _ = cli(*argv, "--explain")
    for s in steps:
        assert s["quantity"] in text and s["value"] in text


# ---- point 9: a write that fails after the benchmark ----------------------------------------


@pytest.mark.parametrize(
    ("where", "says"),
    [("no/such/dir/c.json", "does not exist"), ("", "is a folder")],
)
def test_bench_checks_the_calibration_destination_before_it_runs(tmp_path, where, says) -> None:
    """No benchmark line is printed: the destination is refused before any kernel is timed
    (and before torch is needed)."""
    dest = str(tmp_path / where) if where else str(tmp_path)
    code, out, err = cli("bench", "--sizes", "32", "--repeats", "1", "--save-calibration", dest)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"trainbudget bench: error: save-calibration = {dest!r}: ")
    assert says in err


# ---- point 11: the README's table and claims ------------------------------------------------


def test_report_as_the_readme_table_writes_it_needs_no_global_batch(tmp_path) -> None:
    """`report --model M --tokens N --gpus G --gpu NAME --out report.html` once failed with
    '--global-batch = None: is needed'; now the batch defaults to ~4M tokens, and says so."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "report.html"
    argv = ("report", "--model", "llama-3-8b", "--tokens", "1T", "--gpus", "64")
    code, stdout, err = cli(*argv, "--gpu", "h100-sxm", "--out", str(out), "--json")
    assert code == 0, err
    report = json.loads(stdout)["report"]
    assert report["global_batch"] == 512  # 4 x 2**20 tokens / 8,192 per sequence
    assert any("global batch 512: 4,194,304 tokens per step" in a for a in report["assumptions"])
    assert "--global-batch" in out.read_text()


VALIDATE_COUNTS = {
    "README.md": (
        "holds {runs} published training runs from {sources} sources and scores its predicted "
        "step time on {scored} of them, from {scored_sources} sources; it leaves out {left} run "
        "on hardware outside the catalog"
    ),
    "README.zh-CN.md": (
        "收录来自 {sources} 个来源的 {runs} 次公开训练记录，对其中来自 {scored_sources} 个来源的 "
        "{scored} 次的单步时间预测计分；{left} 次运行在硬件目录之外的硬件上"
    ),
    # the validation page said 195 runs from 24 sources while validate held 225 from 32
    "docs/validation.md": (
        "({runs} runs from {sources} sources (`source_key`), {scored} of them scored, from "
        "{scored_sources};"
    ),
    # the calibration page said 83 runs from 18 sources, 67 scored
    "docs/calibration.md": (
        "predicts the step time of {runs} published training runs from {sources} sources and "
        "scores {scored} of them, from {scored_sources} sources"
    ),
    "docs/zh-CN/calibration.md": (
        "根据来自 {sources} 个来源的 {runs} 次公开训练记录的模型、硬件和布局预测单步时间，"
        "对其中来自 {scored_sources} 个来源的 {scored} 次计分"
    ),
    "docs/zh-CN/validation.md": (
        "（来自 {sources} 个来源（`source_key`）的 {runs} 次训练，其中来自 {scored_sources} "
        "个来源的 {scored} 次计分；"
    ),
}


@pytest.mark.parametrize("readme", sorted(VALIDATE_COUNTS))
def test_readme_counts_the_runs_validate_holds_and_scores(readme) -> None:
    """README once said 26 published runs while the table scored 25: the counts it states are
    the ones `validate` reports."""
    from trainbudget.published import PUBLISHED_RUNS

    result = cli_json("validate")
    scored = [r for r in result["runs"] if r["excluded"] is None]
    assert len(scored) == result["scored"]
    sentence = VALIDATE_COUNTS[readme].format(
        runs=len(PUBLISHED_RUNS),
        sources=len({r.source_key for r in PUBLISHED_RUNS}),
        scored=len(scored),
        scored_sources=len({r["source"] for r in scored}),
        left=len(PUBLISHED_RUNS) - len(result["runs"]),
    )
    assert sentence in " ".join((ROOT / readme).read_text(encoding="utf-8").split())


def test_the_flop_rate_the_readme_advertises_is_taken_by_a_flag() -> None:
    """`989.5TFLOPS` is H100 SXM's dense bf16 peak: giving it to --peak-flops changes nothing,
    half of it doubles the MFU."""
    mfu = ("mfu", "--model", "gpt2", "--step-seconds", "1", "--sequences", "8")
    mfu = (*mfu, "--gpu", "h100-sxm")
    catalog = cli_json(*mfu)["mfu"]
    assert cli_json(*mfu, "--peak-flops", "989.5TFLOPS")["mfu"] == pytest.approx(catalog)
    assert cli_json(*mfu, "--peak-flops", "494.75e12")["mfu"] == pytest.approx(2 * catalog)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "`989.5TFLOPS`" in readme and "--peak-flops" in readme


@pytest.mark.parametrize(
    ("readme", "sentence"), [("README.md", "51 s"), ("README.zh-CN.md", "51 s")]
)
def test_readme_says_what_machine_timed_the_default_training_run(readme, sentence) -> None:
    text = " ".join((ROOT / readme).read_text(encoding="utf-8").split())
    around = text[text.index(sentence) - 300 : text.index(sentence) + 300]
    assert "AMD EPYC" in around and "torch 2.13.0" in around


# ---- point 12: wording ----------------------------------------------------------------------


PLAN_8B = ("plan", "--model", "llama-3-8b", "--gpus", "64", "--global-batch", "512")
RELIABILITY = (
    *("reliability", "--gpus", "8", "--gpu-failure-rate-per-day", "0.001"),
    *("--checkpoint-bytes", "1GB", "--write-bytes-per-second", "1GB/s"),
)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ((*GPT2, "--price-per-gpu-hour", "cheap"), "expected an amount of money such as 2.5"),
        (
            (*PLAN_8B, "--tokens", "1T", "--within-days", "30", "--prices", "h100-sxm=lots"),
            "expected an amount of money",
        ),
        (
            (*PLAN_8B, "--tokens", "1T", "--within-days", "a month", "--prices", "2"),
            "expected a duration such as 90s, 15min, 2h or 3days (a bare number is days)",
        ),
        (
            ("mfu", "--model", "gpt2", "--step-seconds", "fast", "--sequences", "8"),
            "expected a duration such as 90s, 15min, 2h or 3days (a bare number is seconds)",
        ),
        ((*RELIABILITY, "--train-days", "long"), "a bare number is days"),
    ],
)
def test_prices_and_durations_are_not_told_to_be_counts(argv, says) -> None:
    line = one_line_error(argv)
    assert says in line and "such as 15T" not in line


def test_prices_and_durations_take_their_units() -> None:
    dollars = cli_json(*GPT2, "--tokens", "1e9", "--price-per-gpu-hour", "$2.5")["cost"]
    assert dollars == cli_json(*GPT2, "--tokens", "1e9", "--price-per-gpu-hour", "2.5")["cost"]
    mfu = ("mfu", "--model", "gpt2", "--sequences", "8", "--step-seconds")
    assert cli_json(*mfu, "755ms")["mfu"] == pytest.approx(cli_json(*mfu, "0.755")["mfu"])
    days = cli_json(*RELIABILITY, "--train-days", "1.5")["wall_clock_days"]
    assert days == cli_json(*RELIABILITY, "--train-days", "36h")["wall_clock_days"]


@pytest.mark.parametrize(
    "argv",
    [
        ("report", "--model", "gpt2", "--tokens", "1e9"),
        ("plan", "--model", "gpt2", "--gpus", "8", "--global-batch", "8", "--within-days", "3"),
        ("intensity", "--op", "dot"),
        (*GPT2, "--gpu-failure-rate-per-day", "0.001"),
    ],
)
def test_a_missing_option_is_named_without_printing_none(argv) -> None:
    line = one_line_error(argv)
    assert "None" not in line and ": error: --" in line


@pytest.mark.parametrize("command", [GPT2, ("fit", "--gpu", "h100-sxm")])
def test_zero_and_negative_gpus_break_the_same_rule(command) -> None:
    zero = one_line_error((*command, "--gpus", "0"))
    negative = one_line_error((*command, "--gpus", "-8"))
    assert zero.endswith("'0': must be a positive integer")
    assert negative.endswith("'-8': must be a positive integer")


def test_gpu_and_model_names_are_found_whatever_their_case() -> None:
    upper = cli_json("estimate", "--model", "Llama-3-8B", "--gpu", "H100-SXM", "--tokens", "1T")
    lower = cli_json("estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--tokens", "1T")
    assert upper == lower


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (("estimate", "--model", "llama-3-8"), "(did you mean llama-3-8b"),
        ((*GPT2, "--gpu", "h100"), "(did you mean h100-nvl, h100-pcie or h100-sxm?)"),
        (("fit", "--gpus", "8", "--gpu", "a100"), "(did you mean a100-40gb or a100-80gb?)"),
    ],
)
def test_a_near_miss_name_gets_a_did_you_mean(argv, hint) -> None:
    assert hint in one_line_error(argv)
