"""The README's notebook example (its ```python block, in English and in Chinese) runs, and
every figure it prints is the CLI's `--json` figure for the same question. The plot is
optional: drawn and checked as a PNG where matplotlib is installed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.clirun import cli_json

ROOT = Path(__file__).resolve().parents[2]
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def readme_example(readme: str) -> str:
    blocks = PYTHON_BLOCK.findall((ROOT / readme).read_text(encoding="utf-8"))
    assert len(blocks) == 1, f"{readme} should hold one python block, the notebook example"
    return blocks[0]


@pytest.mark.parametrize("readme", ["README.md", "README.zh-CN.md"])
def test_the_notebook_example_runs_and_its_figures_are_the_clis(readme, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the plot is saved
    monkeypatch.setenv("MPLBACKEND", "Agg")
    space: dict = {}
    exec(compile(readme_example(readme), readme, "exec"), space)

    e = space["e"]
    question = "--model llama-3-70b --tokens 15T --gpus 1024 --gpu h100-sxm --seq-len 8192"
    doc = cli_json("estimate", *question.split())
    assert e.to_json() == doc
    assert (e.time_days, e.plan.describe(), e.memory.peak_bytes) == (
        doc["time_days"],
        doc["plan"]["description"],
        doc["memory_bytes"]["total"],
    )

    best = space["best"]
    plan_question = ["--model", "llama-3-8b", "--gpus", "64", "--gpu", "h100-sxm"]
    plans = cli_json("plan", *plan_question, "--global-batch", "512")["plans"]
    assert best.plan.describe() == plans[0]["plan"]["description"]
    assert best.time.step_seconds == plans[0]["step_seconds"]

    for n, days in zip(space["gpus"], space["days"], strict=True):
        cli = cli_json("estimate", "--model", "llama-3-8b", "--tokens", "1T", "--gpus", str(n))
        assert days == cli["time_days"], n
    assert space["days"] == sorted(space["days"], reverse=True)  # more GPUs, fewer days

    if space["plt"] is not None:
        space["plt"].close("all")
        assert (tmp_path / "days_by_gpus.png").read_bytes().startswith(PNG_SIGNATURE)


def test_both_readmes_run_the_same_code():
    def code(readme: str) -> list[str]:  # the comments are translated, the code is not
        lines = (line.split("#", 1)[0].rstrip() for line in readme_example(readme).splitlines())
        return [line for line in lines if line]

    assert code("README.md") == code("README.zh-CN.md")
