"""`trainbudget report`: the page a user gets from the command line, its numbers against
`trainbudget plan`, its files, its one-line errors, a headless-browser rendering and a report
on a real (tiny) training run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from page_check import assert_self_contained, parse_page

from clirun import cli, cli_json
from trainbudget.core.parallel.timing.efficiency import DEFAULT_EFFICIENCY

pytest.importorskip("matplotlib")

PLAN_ARGS = (
    *("--model", "llama-3-70b", "--tokens", "15T", "--gpus", "1024", "--gpu", "h100-sxm"),
    *("--seq-len", "8192", "--global-batch", "512"),
)
FAST = ("--scaling-gpus", "512,1024")  # two searches instead of nine
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def plan_json() -> dict:
    return cli_json("plan", *PLAN_ARGS)


def test_the_headline_is_the_plan_commands_answer(tmp_path: Path, plan_json: dict) -> None:
    out = tmp_path / "report.html"
    code, text, err = cli("report", *PLAN_ARGS, *FAST, "--out", str(out))
    assert code == 0, err
    best = plan_json["plans"][0]
    first = text.splitlines()[0]
    assert first.startswith(f"{best['time_days']:.2f} days and {best['gpu_hours']:,.0f} GPU-hours")
    assert best["plan"]["description"] in first
    assert f"{best['tokens_per_second']:,.0f} tokens/s" in first
    html = out.read_text()
    page = parse_page(html)
    assert first in page.text
    assert_self_contained(html, page)
    pngs = sorted(p.name for p in (tmp_path / "report_files").iterdir())
    assert pngs == ["failures.png", "memory.png", "roofline.png", "scaling.png", "step_time.png"]


def test_json_holds_the_gathered_numbers(tmp_path: Path, plan_json: dict) -> None:
    pngs = tmp_path / "plots"
    d = cli_json(
        "report", *PLAN_ARGS, *FAST, "--out", str(tmp_path / "r.html"), "--png-dir", str(pngs)
    )
    assert d["out"] == str(tmp_path / "r.html")
    assert {Path(p).parent for p in d["png_files"]} == {pngs}
    answer = d["report"]["answer"]
    assert answer["train_days"] == pytest.approx(plan_json["plans"][0]["time_days"], rel=1e-12)
    assert answer["step_seconds"] == plan_json["plans"][0]["step_seconds"]
    # no failure options: the report's defaults, listed as assumptions
    assumptions = "\n".join(d["report"]["assumptions"])
    assert "--gpu-failure-rate-per-day" in assumptions
    assert "--checkpoint-write-bytes-per-second" in assumptions


def test_calibration_draws_the_measured_roofline(tmp_path: Path) -> None:
    cal = tmp_path / "cal.json"
    cal.write_text(
        json.dumps(
            {
                "format": "trainbudget-calibration",
                "version": 1,
                "device_name": "NVIDIA H100 80GB HBM3",
                "catalog_key": "h100-sxm",
                "matmul_fraction_of_peak": {"bf16": 0.5},
                "hbm_fraction_of_peak": 0.9,
                "best_flops_per_second": {"bf16": 4.9e14},
                "bandwidth_bytes_per_second": 3.0e12,
            }
        )
    )
    out = str(tmp_path / "r.html")
    d = cli_json("report", *PLAN_ARGS, *FAST, "--out", out, "--calibration", str(cal))
    roof = d["report"]["roofline"]
    assert roof["measured"]["device_name"] == "NVIDIA H100 80GB HBM3"
    assert roof["measured_flops_per_second"] == 4.9e14
    # the measured large-GEMM fraction, times the share kept inside a training step
    assert roof["matmul_efficiency"] == pytest.approx(0.5 * DEFAULT_EFFICIENCY.in_training)
    plan = cli_json("plan", *PLAN_ARGS, "--calibration", str(cal))
    assert d["report"]["answer"]["step_seconds"] == plan["plans"][0]["step_seconds"]


def test_run_report_from_the_command_line(synthetic_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.html"
    code, text, err = cli("report", "--run", str(synthetic_run), "--out", str(out))
    assert code == 0, err
    assert text.startswith("synthetic (finished; 15 logged steps up to step 30); loss ")
    page = parse_page(out.read_text())
    assert {"summary", "loss", "throughput", "memory", "events"} <= page.ids
    d = cli_json("report", "--run", str(synthetic_run), "--out", str(out))
    assert len(d["report"]["points"]) == 15 and d["report"]["summary"]["steps"] == 30


def test_the_run_report_shows_comm_json(synthetic_run: Path, tmp_path: Path) -> None:
    # rows as train.observe.comm_report writes them (a zero1 run's, shortened)
    row = {"axis": "dp", "op": "broadcast", "measured_bytes": 109696, "predicted_bytes": 0.0}
    row |= {"count": 28, "predicted_count": 0.0, "explained_bytes": 109696.0}
    row |= {"equal": False, "explained": True, "difference": "ZeroRedundancyOptimizer: ..."}
    doc = {"counted": "step 3", "rows": [row, {"axis": 1, "measured_bytes": "x"}], "notes": []}
    (synthetic_run / "comm.json").write_text(json.dumps(doc))
    out = tmp_path / "run.html"
    code, _, err = cli("report", "--run", str(synthetic_run), "--out", str(out))
    assert code == 0, err
    page = parse_page(out.read_text())
    assert "comm" in page.ids
    assert "named difference" in out.read_text() and "109,696" in out.read_text()
    d = cli_json("report", "--run", str(synthetic_run), "--out", str(out))
    rows = d["report"]["comm"]["rows"]
    assert rows[0]["count"] == 28 and rows[1]["measured_bytes"] is None  # a bad value: None


def test_a_run_with_a_torn_last_line_is_drawn_up_to_it(synthetic_run: Path, tmp_path) -> None:
    # the failure: a full disk left half a line at the end, and the report refused the run
    with open(synthetic_run / "metrics.jsonl", "a") as f:
        f.write('{"step": 32, "loss": 1.')
    out = tmp_path / "r.html"
    code, text, err = cli("report", "--run", str(synthetic_run), "--out", str(out))
    assert code == 0, err
    (note,) = [line for line in text.splitlines() if line.startswith("note: ")]
    assert "metrics.jsonl:23" in note and "is cut short" in note and "skipped 1 line" in note
    assert "is cut short" in out.read_text()  # the page's notes say it too


def _bad_metrics(tmp_path: Path) -> str:
    run = tmp_path / "bad-run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("{oops\n")
    return str(run)


@pytest.mark.parametrize(
    "argv, needle",
    [
        ((), "--model/--run"),
        (("--model", "gpt2", "--run", "x"), "--model/--run"),
        (("--model", "llama-3-70b", "--tokens", "1T", "--global-batch", "8"), "--gpus"),
        (("--model", "llama-3-70b", "--gpus", "8", "--global-batch", "8"), "--tokens"),
        (
            ("--model", "dense:7e9", "--gpus", "8", "--global-batch", "8", "--tokens", "1T"),
            "--model",
        ),
        ((*PLAN_ARGS[:6], "--global-batch", "512", "--tokens", "0"), "tokens"),
        ((*PLAN_ARGS, "--zero-stages", "5"), "zero_stages"),
        ((*PLAN_ARGS, "--scaling-gpus", "64,x"), "scaling_gpus"),
        ((*PLAN_ARGS, "--gpu-failure-rate-per-day", "2"), "gpu_failure_rate_per_day"),
        ((*PLAN_ARGS, "--out", "report.txt"), "out"),
        (("--run", "/nonexistent/run"), "run"),
        (("--run", ".", "--gpus", "8"), "--gpus"),
        (("--run", "BAD"), "metrics.jsonl:1"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(tmp_path: Path, argv, needle) -> None:
    argv = tuple(_bad_metrics(tmp_path) if a == "BAD" else a for a in argv)
    if "--out" not in argv:
        argv = (*argv, "--out", str(tmp_path / "r.html"))
    code, out, err = cli("report", *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err, err
    assert err.startswith("trainbudget report: error: ")


def test_without_matplotlib_the_error_says_what_to_install(synthetic_run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    code, out, err = cli("report", "--run", str(synthetic_run), "--out", str(tmp_path / "r.html"))
    assert code == 2 and out == ""
    assert "needs matplotlib, which is not installed: pip install -e '.[report]'" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium: the headless-browser check needs one")
def test_headless_chromium_renders_the_plots(tmp_path: Path) -> None:
    import matplotlib.image

    out = tmp_path / "report.html"
    code, _, err = cli("report", *PLAN_ARGS, *FAST, "--out", str(out))
    assert code == 0, err
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            # no network here: without these Chromium keeps dialling Google's hosts, refused
            *("--disable-quic", "--no-first-run", "--disable-background-networking"),
            *("--disable-component-update", "--disable-sync"),
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1200,3000",
            out.resolve().as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert shot.stat().st_size > 50_000
    pixels = matplotlib.image.imread(shot)  # (3000, 1200, channels), floats in [0, 1]
    assert pixels.shape[:2] == (3000, 1200)
    # not blank: plots and tables make the page far from uniform, also below the first screen
    assert pixels.std() > 0.1
    assert pixels[1500:].std() > 0.1


@pytest.mark.torch
def test_report_of_a_real_tiny_run(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    run = tmp_path / "tiny"
    argv = (
        *("--steps", "20", "--log-interval", "2", "--eval-interval", "10", "--device", "cpu"),
        *("--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2", "--set", "d_ff=64"),
        *("--set", "vocab_size=257", "--set", "max_seq_len=64", "--seq-len", "32"),
        *("--micro-batch", "4", "--no-tensorboard", "--out", str(run)),
    )
    code, _, err = cli("train", *argv)
    assert code == 0, err
    d = cli_json("report", "--run", str(run), "--out", str(tmp_path / "run.html"))
    points = d["report"]["points"]
    assert [p["step"] for p in points] == list(range(2, 21, 2))
    assert points[-1]["loss"] < points[0]["loss"]  # it learns
    assert all(p["predicted_tokens_per_second"] > 0 for p in points)
    summary = d["report"]["summary"]
    assert summary["step_seconds_predicted"] > 0 and summary["step_seconds_measured_median"] > 0
    page = parse_page((tmp_path / "run.html").read_text())
    assert {"summary", "loss", "throughput", "step-time", "memory"} <= page.ids
