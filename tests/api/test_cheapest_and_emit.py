"""`trainbudget.plan(..., within_days=D)` is `plan --within-days D`, and a result's
`.emit(engine)` is `plan --emit ENGINE`: the same document and the same file text, through the
same functions (api.answers.cheapest, api.returned.engine_config), and the same one-line
refusals."""

from __future__ import annotations

import dataclasses

import pytest
from tests.clirun import cli, cli_json, one_line_error

import trainbudget as tb
from trainbudget.core.errors import SpecError

# a narrow policy keeps the four searches fast (as tests/cli/plan/test_plan_cmd.py's CHEAP)
NARROW = {"no_cp": True, "zero_stages": "0,1", "recompute_options": "none"}
NARROW_ARGV = ("--no-cp", "--zero-stages", "0,1", "--recompute-options", "none")
CHEAP_ARGV = (
    *("plan", "--model", "gpt2", "--gpus", "8", "--global-batch", "16", *NARROW_ARGV),
    *("--tokens", "1e10", "--within-days", "365", "--gpu-options", "h100-sxm,a100-80gb"),
    *("--gpu-counts", "8,16", "--prices", "h100-sxm=3,a100-80gb=1.5"),
)
# the README's 70B question on 1,024 H100s (tests/cli/plan/test_plan_emit.py's PLAN_70B)
Q70 = {"gpus": 1024, "gpu": "h100-sxm", "global_batch": 512, "seq_len": 8192, "tokens": "15T"}
PLAN_70B = (
    *("plan", "--model", "llama-3-70b", "--gpus", "1024", "--gpu", "h100-sxm"),
    *("--global-batch", "512", "--seq-len", "8192", "--tokens", "15T"),
)


def _cheap(**extra):
    return tb.plan(
        "gpt2",
        gpus=8,
        global_batch=16,
        tokens=1e10,
        within_days=365,
        gpu_options=["h100-sxm", "a100-80gb"],
        gpu_counts=(8, 16),
        **NARROW,
        **extra,
    )


def test_within_days_is_the_clis_quotes_document():
    quotes = _cheap(prices={"h100-sxm": 3, "a100-80gb": 1.5})
    assert isinstance(quotes, tb.Quotes)
    assert quotes.to_json() == cli_json(*CHEAP_ARGV)
    assert quotes.best == quotes.quotes[0] and len(quotes.quotes) == 4  # 2 types x 2 counts
    with pytest.raises(dataclasses.FrozenInstanceError):
        quotes.framework = "megatron"  # type: ignore[misc]


def test_within_days_refusals_are_the_clis_lines():
    with pytest.raises(SpecError) as err:
        _cheap()  # no price
    argv = CHEAP_ARGV[: CHEAP_ARGV.index("--prices")]
    assert one_line_error(argv) == f"trainbudget plan: error: {err.value}"
    with pytest.raises(SpecError) as err:
        _cheap(prices={"h100-sxm": 3})  # a100-80gb unpriced
    argv = (*argv, "--prices", "h100-sxm=3")
    assert one_line_error(argv) == f"trainbudget plan: error: {err.value}"
    with pytest.raises(SpecError, match=r"^--gpu-options = "):  # only with within_days
        tb.plan("gpt2", gpus=8, gpu_options="h100-sxm")


@pytest.mark.parametrize("engine", ["torchtitan", "megatron"])
def test_emit_is_the_text_plan_emit_prints(engine):
    code, out, err = cli(*PLAN_70B, "--emit", engine)
    assert code == 0, err
    assert tb.plan("llama-3-70b", **Q70).emit(engine) == out


def test_a_planned_estimate_emits_its_plan_as_plan_does():
    """The planner answer of `estimate` is the same search: same plan, same file."""
    planned = tb.estimate("llama-3-70b", **Q70)
    best = tb.plan("llama-3-70b", **Q70).best
    assert planned.kind == "planner" and planned.plan == best.plan
    assert planned.emit("torchtitan") == tb.plan("llama-3-70b", **Q70).emit("torchtitan")


def test_emit_refusals_name_the_engine_and_the_reason():
    plan = tb.plan("llama-3-70b", **Q70)
    with pytest.raises(SpecError) as err:
        plan.emit("nemo")
    assert one_line_error((*PLAN_70B, "--emit", "nemo")) == f"trainbudget plan: error: {err.value}"
    with pytest.raises(SpecError, match=r"^--emit = 'torchtitan': a one-gpu estimate has no"):
        tb.estimate("gpt2").emit("torchtitan")
    tight = tb.plan("llama-3-70b", gpus=8, gpu="h100-sxm", **NARROW)  # 70B on 8 GPUs: no fit
    assert not tight.best.fits
    with pytest.raises(SpecError, match="no plan fits in memory"):
        tight.emit("megatron")


def test_an_unknown_engine_is_the_error_before_the_plan_is_looked_at():
    # a one-GPU estimate has no plan to emit either, but the name is refused first, listing the
    # engines (the order engine_config.check_engine keeps for both result types)
    with pytest.raises(SpecError, match=r"^--emit = 'nemo': unknown.*known: deepspeed, megatron"):
        tb.estimate("gpt2").job("nemo")
    tight = tb.plan("llama-3-70b", gpus=8, gpu="h100-sxm", **NARROW)
    with pytest.raises(SpecError, match=r"^--emit = 'nemo': unknown"):
        tight.job("nemo")
