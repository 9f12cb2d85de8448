"""report.page, plan_page and run_page: well-formed, self-contained pages with every section,
every value escaped, and the numbers of the data they were given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from page_check import assert_self_contained, parse_page

pytest.importorskip("matplotlib")

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.model_source.model_arg import resolve_model
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.report.figures import Chart
from trainbudget.report.page import default_png_dir, table, write_report
from trainbudget.report.plan_charts import plan_charts
from trainbudget.report.plan_data import PlanQuestion, plan_report
from trainbudget.report.plan_page import headline, plan_page
from trainbudget.report.run_charts import run_charts
from trainbudget.report.run_page import run_page
from trainbudget.train.spec.run_files import read_run

PLAN_SECTIONS = {"question", "answer", "candidates", "memory", "step-time", "scaling"}
PLAN_SECTIONS |= {"roofline", "failures", "assumptions"}
RUN_SECTIONS = {"question", "answer", "summary", "loss", "throughput", "step-time", "memory"}
RUN_SECTIONS |= {"optimizer", "events", "config", "notes"}


@pytest.fixture(scope="module")
def plan():
    q = PlanQuestion(
        model=resolve_model("llama-2-7b"),
        cluster=Cluster(hardware=get_hardware("a100-80gb"), n_gpus=64),
        tokens=2e12,
        global_batch=256,
        seq_len=4096,
        precision=get_precision("bf16-mixed"),
        optimizer=get_optimizer("adamw"),
        price_per_gpu_hour=1.5,
        gpu_failure_rate_per_day=0.001,
        checkpoint_write_bytes_per_second=20e9,
        scaling_gpus=(16, 64, 256),
    )
    report = plan_report(q)
    charts = plan_charts(report)
    return report, charts, plan_page(report, charts)


def test_plan_page_has_every_section_and_embeds_its_plots(plan) -> None:
    _, charts, html = plan
    page = parse_page(html)
    assert page.ids >= PLAN_SECTIONS
    assert {f"fig-{name}" for name in charts} <= page.ids
    assert len(page.images) == len(charts) == 5
    assert_self_contained(html, page)


def test_plan_page_shows_the_core_numbers(plan) -> None:
    report, _, html = plan
    text = parse_page(html).text
    question, answer = headline(report)
    a = report.answer
    assert answer in text and question in text
    assert f"{a.train_days:.2f} days" in answer
    assert f"cost {a.cost:,.0f}" in answer  # a price was given
    assert a.cost == pytest.approx(a.gpu_hours * 1.5)
    for c in report.candidates:
        assert c.plan in text
    for assumption in report.assumptions:
        assert " ".join(assumption.split()) in text


def test_run_page_has_every_section_and_escapes(synthetic_run: Path) -> None:
    config = json.loads((synthetic_run / "config.json").read_text())
    config["model"] = "<script>alert(1)</script>"
    (synthetic_run / "config.json").write_text(json.dumps(config))
    report = read_run(synthetic_run)
    charts = run_charts(report)
    html = run_page(report, charts)
    page = parse_page(html)
    assert page.ids >= RUN_SECTIONS
    assert len(page.images) == len(charts) == 5
    assert_self_contained(html, page)
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;b&gt;kept as text&lt;/b&gt;" in html  # a note from summary.json
    text = page.text
    assert "rollback" in text and "checkpoint" in text
    assert "+25.0%" in text  # step time: 0.125 s measured / 0.1 s predicted - 1


def test_run_page_of_a_running_run(tmp_path: Path) -> None:
    from synthetic_runs import write_run

    report = read_run(write_run(tmp_path / "going", summary=False, config=False))
    html = run_page(report, run_charts(report))
    text = parse_page(html).text
    assert "running" in text and "no summary.json yet" in text


def test_table_escapes_cells() -> None:
    assert table(("a", "b"), [("<x>", 1)]) == (
        "<table><thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td>&lt;x&gt;</td>"
        '<td class="num">1</td></tr></tbody></table>'
    )


def test_write_report_puts_the_pngs_beside_the_page(tmp_path: Path) -> None:
    chart = Chart(name="one", alt="a chart", png=b"\x89PNG\r\n\x1a\n")
    out = tmp_path / "r.html"
    paths = write_report(out, "<!DOCTYPE html>", {"one": chart})
    assert paths == [default_png_dir(out) / "one.png"] and paths[0].read_bytes() == chart.png
    assert default_png_dir(out) == tmp_path / "r_files"
    assert write_report(out, "x", {"one": chart}, tmp_path / "pngs") == [tmp_path / "pngs/one.png"]
    with pytest.raises(SpecError, match="html"):
        write_report(tmp_path / "r.txt", "x", {})
    with pytest.raises(SpecError, match="does not exist"):
        write_report(tmp_path / "missing" / "r.html", "x", {})


def test_a_job_that_never_finishes_still_gets_a_page() -> None:
    q = PlanQuestion(
        model=resolve_model("llama-2-7b"),
        cluster=Cluster(hardware=get_hardware("h100-sxm"), n_gpus=4096),
        tokens=1e12,
        global_batch=1024,
        seq_len=4096,
        precision=get_precision("bf16-mixed"),
        optimizer=get_optimizer("adamw"),
        gpu_failure_rate_per_day=0.2,  # an MTBF shorter than a restart
        checkpoint_write_bytes_per_second=20e9,
        scaling_gpus=(3000,),  # no whole-node layout: nothing to draw
    )
    report = plan_report(q)
    assert report.failures is None and "restart_seconds" in report.failures_problem
    charts = plan_charts(report)
    assert set(charts) == {"memory", "step_time", "roofline"}
    page = parse_page(plan_page(report, charts))
    assert page.ids >= PLAN_SECTIONS and len(page.images) == 3
    assert "No failure figures: mtbf_seconds" in page.text
    assert "Not shown: 3000 GPUs" in page.text
