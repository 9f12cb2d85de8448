"""A returned answer shows itself: `repr` in a few lines with the figures of its JSON, and
`_repr_html_` with the memory and step bars as inline SVG whose segments are to scale."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

import trainbudget as tb
from trainbudget.api.returned.display import BAR_WIDTH_PX


@pytest.fixture(scope="module")
def planned():
    return tb.estimate("llama-3-8b", tokens="1T", gpus=64, global_batch=512)


def _svgs(html: str) -> list[ET.Element]:
    return [ET.fromstring(s) for s in re.findall(r"<svg.*?</svg>", html)]


def test_repr_says_the_layout_days_and_memory(planned):
    text = repr(planned)
    doc = planned.to_json()
    assert text.startswith("<trainbudget.Estimate\n")
    assert doc["plan"]["description"] in text
    assert f"{doc['time_days']:.2f} days" in text
    assert "fits" in text and "\n" in text


def test_the_html_bars_are_to_scale_and_need_no_script(planned):
    html = planned._repr_html_()
    assert "<script" not in html and "http" not in html
    memory, step = _svgs(html)
    widths = [float(r.get("width")) for r in memory.iter("rect")]
    m = planned.memory
    assert sum(widths) == pytest.approx(BAR_WIDTH_PX * m.peak_bytes / m.capacity_bytes, abs=0.5)
    assert len(widths) == sum(1 for v in m.parts_bytes.values() if v > 0)
    limit = next(memory.iter("line"))
    # the mark at the fits rule's limit on the allocated peak, to the device's memory's scale
    limit_px = BAR_WIDTH_PX * m.usable_bytes / m.capacity_bytes
    assert float(limit.get("x1")) == pytest.approx(limit_px, abs=0.05)  # printed to 0.1 px
    step_widths = [float(r.get("width")) for r in step.iter("rect")]
    assert sum(step_widths) == pytest.approx(BAR_WIDTH_PX, abs=0.5)  # the parts sum to the step


def test_one_gpu_and_plan_results_draw_too():
    one = tb.estimate("gpt2")
    assert len(_svgs(one._repr_html_())) == 1  # no step without a plan
    result = tb.plan("llama-3-8b", gpus=16, top=3)
    html = result._repr_html_()
    assert html.count("<tr>") == 1 + len(result.plans) == 4
    assert len(_svgs(html)) == 2  # the best plan's memory and step
    assert repr(result).count("\n") == 1 + len(result.plans)


def test_plan_html_draws_the_memory_it_is_handed():
    """display reads no result type (issue 24: results.py imports display, never the reverse):
    the bars are of the Memory handed in, and there are none without one."""
    from trainbudget.api.returned.display import plan_html
    from trainbudget.api.returned.results import plan_memory

    result = tb.plan("llama-3-8b", gpus=16, top=2)
    memory = plan_memory(result.best, result.cluster, result.search.rule)
    assert plan_html(result, memory) == result._repr_html_()
    bare = plan_html(result, None)
    assert _svgs(bare) == [] and bare.count("<tr>") == 1 + len(result.plans)
