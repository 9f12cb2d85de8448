"""`plan --within-days D` (`trainbudget.plan(..., within_days=D)`): which GPU type and how many
finish the tokens by the deadline at the least cost, each candidate searched as `plan` searches
one cluster (core.parallel.search.procurement)."""

from __future__ import annotations

import argparse
import functools

from trainbudget.api.inputs.question import (
    global_batch_from_args,
    policy_from_args,
    seq_len_from_args,
)
from trainbudget.api.inputs.values import (
    comma_list,
    dumps_json,
    duration_days,
    money,
    positive_int,
    refuse_repeats,
    token_count,
)
from trainbudget.api.returned.results import Quotes
from trainbudget.core.errors import SpecError, lookup
from trainbudget.core.parallel.search.planner_fast import search_fast
from trainbudget.core.parallel.search.procurement import Candidate, cheapest
from trainbudget.core.spec.frameworks import Framework
from trainbudget.core.spec.hardware import HARDWARE, get_hardware
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_optimizer, get_precision


def answer_cheapest(args: argparse.Namespace, model: ModelSpec, fw: Framework) -> Quotes:
    """The quotes of every GPU option x count, cheapest first; `args` as `plan` parses them."""
    if args.calibration is not None:
        raise SpecError(
            "--calibration",
            args.calibration,
            "describes one GPU; it cannot be used with --within-days, which compares GPU types",
        )
    if args.emit is not None:
        raise SpecError("--emit", args.emit, "emits one plan; not with --within-days")
    seq_len = seq_len_from_args(args, model).value
    run_search = functools.partial(
        search_fast,
        model,
        global_batch=global_batch_from_args(args, seq_len).value,
        seq_len=seq_len,
        precision=get_precision(args.precision),
        optimizer=get_optimizer(args.optimizer),
        policy=policy_from_args(args),
        top=positive_int("top", args.top),
        causal=args.causal,
        count_causal=args.count_causal,
        framework=fw,
    )
    rows = tuple(_row(q) for q in _quotes(args, run_search))
    doc = {"quotes": list(rows), "best": rows[0], "framework": fw.name}
    return Quotes(quotes=rows, framework=fw.name, _json_text=dumps_json(doc))


def _quotes(args: argparse.Namespace, run_search) -> list:
    if args.tokens is None:
        raise SpecError("--tokens", None, "is required with --within-days")
    names_text = args.gpu if args.gpu_options is None else args.gpu_options
    names = [lookup("gpu_options", n, HARDWARE).name for n in comma_list("gpu_options", names_text)]
    refuse_repeats("gpu_options", names_text, names)
    counts_text = args.gpus if args.gpu_counts is None else args.gpu_counts
    counts = [positive_int("gpu_counts", c) for c in comma_list("gpu_counts", counts_text)]
    refuse_repeats("gpu_counts", counts_text, counts)
    prices = _prices(args, names)
    candidates = [
        Candidate(hardware=get_hardware(n), n_gpus=c, price_per_gpu_hour=prices[n])
        for n in names
        for c in counts
    ]
    return cheapest(
        candidates,
        tokens=token_count("tokens", args.tokens),
        max_days=duration_days("within_days", args.within_days),
        search=run_search,
    )


def _row(q) -> dict:
    return {
        "gpu": q.candidate.hardware.name,
        "gpus": q.candidate.n_gpus,
        "price_per_gpu_hour": q.candidate.price_per_gpu_hour,
        "plan": q.best.plan.describe() if q.best else None,
        "days": q.days if q.best else None,
        "cost": q.cost if q.best else None,
        "meets_deadline": q.meets_deadline,
    }


def _prices(args: argparse.Namespace, names: list[str]) -> dict[str, float]:
    """A price per GPU option: one for all, or NAME=PRICE for each (names as --gpu-options
    spells them, case ignored); a missing, repeated or extra name is an error."""
    if args.prices is None:
        raise SpecError("--prices", None, "is required with --within-days (price per GPU-hour)")
    if "=" not in args.prices:
        price = money("prices", args.prices)
        return dict.fromkeys(names, price)
    items = [item.partition("=") for item in comma_list("prices", args.prices)]
    keys = [lookup("prices", name.strip(), HARDWARE).name for name, _, _ in items]
    refuse_repeats("prices", args.prices, keys)
    extra = [k for k in keys if k not in names]
    if extra:
        raise SpecError(
            "--prices",
            args.prices,
            f"prices {', '.join(extra)}, which is not among the GPU options ({', '.join(names)})",
        )
    out = {k: money(f"prices[{k}]", value) for k, (_, _, value) in zip(keys, items, strict=True)}
    missing = [n for n in names if n not in out]
    if missing:
        raise SpecError("--prices", args.prices, f"has no price for {', '.join(missing)}")
    return out
