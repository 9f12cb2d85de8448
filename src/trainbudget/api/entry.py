"""`trainbudget.estimate` and `trainbudget.plan`: the CLI's two planning commands as Python
functions, with the CLI's option names (dashes as underscores), units and defaults.

Each builds the option record `trainbudget estimate` / `plan` would parse and hands it to the
one function the command calls (api.answers.estimate_answer.answer_estimate,
api.answers.plan_answer.answer_plan), so the figures, the JSON and the one-line errors are the
CLI's own."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from trainbudget.api.inputs.model_input import model_input
from trainbudget.api.inputs.options import ESTIMATE_DEFAULTS, PLAN_DEFAULTS, namespace
from trainbudget.api.returned.results import Estimate, PlanResult, Quotes
from trainbudget.core.spec.defaults import DEFAULT_GPU

Number = int | float | str
"""A count, size or price: a number, or text as the CLI takes it ("15T", "80GB", "$2.5")."""


def estimate(
    model: str | Mapping,
    *,
    tokens: Number | None = None,
    gpus: Number = 1,
    gpu: str = DEFAULT_GPU,
    seq_len: Number | None = None,
    global_batch: Number | None = None,
    micro_batch: Number | None = None,
    grad_accum: Number | None = None,
    framework: str | None = None,
    precision: str | None = None,
    optimizer: str | None = None,
    recompute: str | None = None,
    flash_attention: bool | None = None,
    price_per_gpu_hour: Number | None = None,
    memory_headroom: Number | None = None,
    mfu: Number | None = None,
    causal: bool = True,
    count_causal: bool = False,
    flops_formula: str | None = None,
    epochs: Number | None = None,
    samples: Number | None = None,
    mean_length: Number | None = None,
    tp: Number | None = None,
    pp: Number | None = None,
    dp: Number | None = None,
    cp: Number | None = None,
    ep: Number | None = None,
    zero: Number | None = None,
    zero_shard: Number | None = None,
    sp: bool = False,
    vpp: Number | None = None,
    pp_layers: str | Sequence[int] | None = None,
    account_for_embedding: bool = False,
    account_for_loss: bool = False,
    recompute_every: Number | None = None,
    schedule: str | None = None,
    offload_optimizer: str | None = None,
    offload_params: str | None = None,
    gpus_per_node: Number | None = None,
    link_efficiency: Number | None = None,
    nic_bandwidth: str | Number | None = None,
    calibration: str | None = None,
    tp_comm_overlap: bool = False,
    compiled: bool = False,
    fp8_param_gather: bool = False,
    loss_kernel: str | None = None,
    attention_kernel: str | None = None,
    fp8_recipe: str | None = None,
    max_tp: Number | None = None,
    zero_stages: str | Sequence[int] | None = None,
    recompute_options: str | Sequence[str] | None = None,
    allow_offload: bool = False,
    no_cp: bool = False,
    no_hsdp: bool = False,
    max_micro_batch: Number | None = None,
    gpu_failure_rate_per_day: Number | None = None,
    checkpoint_write_bytes_per_second: Number | None = None,
    restart_seconds: Number | None = None,
    overrides: Sequence[str] = (),
    explain: bool = False,
) -> Estimate:
    """`trainbudget estimate --model MODEL ...`: one GPU, a given layout (tp=, pp=, ...), or,
    with gpus > 1 and no layout, the fastest layout that fits (the planner's answer).

    `model` is a preset name, a path to a Hugging Face config.json, 'dense:70B', or a mapping
    (a config.json's contents). `overrides` are `--set` items ("n_layers=40"). `explain=True`
    adds the derivation to `to_json()`, as `--explain --json` does. Bad input raises SpecError
    with the line the CLI prints."""
    given = {k: v for k, v in locals().items() if k != "model"}  # first: the options only
    from trainbudget.api.answers.estimate_answer import answer_estimate

    return answer_estimate(_checked(namespace(ESTIMATE_DEFAULTS, model_input(model), given)))


def plan(
    model: str | Mapping,
    *,
    gpus: Number,
    gpu: str = DEFAULT_GPU,
    global_batch: Number | None = None,
    seq_len: Number | None = None,
    tokens: Number | None = None,
    precision: str | None = None,
    optimizer: str | None = None,
    framework: str | None = None,
    tp_comm_overlap: bool = False,
    compiled: bool = False,
    fp8_param_gather: bool = False,
    loss_kernel: str | None = None,
    attention_kernel: str | None = None,
    fp8_recipe: str | None = None,
    causal: bool = True,
    count_causal: bool = False,
    top: Number | None = None,
    gpus_per_node: Number | None = None,
    link_efficiency: Number | None = None,
    nic_bandwidth: str | Number | None = None,
    calibration: str | None = None,
    max_tp: Number | None = None,
    zero_stages: str | Sequence[int] | None = None,
    recompute_options: str | Sequence[str] | None = None,
    recompute: str | None = None,
    allow_offload: bool = False,
    no_cp: bool = False,
    no_hsdp: bool = False,
    flash_attention: bool | None = None,
    max_micro_batch: Number | None = None,
    memory_headroom: Number | None = None,
    gpu_failure_rate_per_day: Number | None = None,
    checkpoint_write_bytes_per_second: Number | None = None,
    restart_seconds: Number | None = None,
    within_days: Number | None = None,
    gpu_options: str | Sequence[str] | None = None,
    gpu_counts: str | Sequence[int] | None = None,
    prices: Number | Mapping[str, Number] | None = None,
    overrides: Sequence[str] = (),
) -> PlanResult | Quotes:
    """`trainbudget plan --model MODEL --gpus N ...`: every layout searched, the fastest that
    fit ranked (`.plans`, `.best`), each with its memory, step time and fit.

    With `within_days` (and `tokens`, `prices`) it is `plan --within-days D`: the quotes of
    each GPU type in `gpu_options` (default `gpu`) and count in `gpu_counts` (default `gpus`),
    cheapest first (`.quotes`, `.best`). `prices` is one price per GPU-hour for all, or a
    mapping GPU name -> price ({"h100-sxm": 3, "a100-80gb": 1.5})."""
    if isinstance(prices, Mapping):  # --prices NAME=PRICE,...
        prices = ",".join(f"{name}={price}" for name, price in prices.items())
    given = {k: v for k, v in locals().items() if k != "model"}  # first: the options only
    from trainbudget.api.answers.plan_answer import answer_plan_command

    return answer_plan_command(_checked(namespace(PLAN_DEFAULTS, model_input(model), given)))


def _checked(args: argparse.Namespace) -> argparse.Namespace:
    """What the CLI's parser checks before the command runs: a --calibration file is read
    whenever it is given (cli.plan.plan_view.calibration_path), even where no step is timed."""
    if args.calibration is not None:
        from trainbudget.core.parallel.timing.calibration import load_calibration

        load_calibration(args.calibration)
    return args
