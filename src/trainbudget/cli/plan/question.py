"""The options of the question `estimate`, `plan` and `report` share (sequence length, global
batch, the layout search's policy) and how its best plan is shown; trainbudget.api.inputs.question
reads them and runs the search."""

from __future__ import annotations

import argparse

# `report` reads the question with these too (the search's policy, seq len, global batch)
from trainbudget.api.inputs.question import SEARCH_DEFAULTS, Search
from trainbudget.api.inputs.question import global_batch_from_args as global_batch_from_args
from trainbudget.api.inputs.question import policy_from_args as policy_from_args
from trainbudget.api.inputs.question import seq_len_from_args as seq_len_from_args
from trainbudget.core.single.flops import RECOMPUTE_KINDS
from trainbudget.core.spec.defaults import DEFAULT_MEMORY_HEADROOM
from trainbudget.core.units import SECONDS_PER_DAY

SEQ_LEN_HELP = (
    "tokens per sequence (default: the model's pre-training length: a config's "
    "rope_scaling.original_max_position_embeddings, else its context length)"
)
GLOBAL_BATCH_HELP = (
    "sequences per optimizer step (default: the power of two nearest 4M tokens per step, "
    "Llama 2/3's batch)"
)


def add_policy_args(g, *, flash: bool = True, recompute: bool = True) -> None:
    """The layout search's options (what policy_from_args reads), for plan, estimate, report."""
    g.add_argument("--max-tp", help="largest TP degree (default: GPUs per node)")
    g.add_argument(
        "--zero-stages",
        default=SEARCH_DEFAULTS["zero_stages"],
        help="ZeRO stages to try (default 0-3)",
    )
    g.add_argument(
        "--recompute-options", help="recomputation policies to try (default none,selective,full)"
    )
    if recompute:
        g.add_argument(
            "--recompute",
            metavar="{" + ",".join(RECOMPUTE_KINDS) + "}",  # checked by api.inputs.choices
            help="one recomputation policy: the search tries only it (as --recompute-options X)",
        )
    g.add_argument("--allow-offload", action="store_true", help="also try CPU optimizer offload")
    g.add_argument("--no-cp", action="store_true", help="do not try context parallelism")
    g.add_argument(
        "--no-hsdp",
        action="store_true",
        help="ZeRO over the whole data-parallel group only (by default shard groups of a node's "
        "dp ranks and their multiples are tried too)",
    )
    if flash:
        g.add_argument(
            "--flash-attention",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="FlashAttention: no s x s attention matrix stored (default on; "
            "--no-flash-attention stores it, as eager attention does)",
        )
    g.add_argument(
        "--max-micro-batch",
        default=SEARCH_DEFAULTS["max_micro_batch"],
        help=f"largest micro-batch (default {SEARCH_DEFAULTS['max_micro_batch']})",
    )
    g.add_argument(
        "--memory-headroom",
        default=DEFAULT_MEMORY_HEADROOM,
        help="a flat fits rule: a plan fits when its allocated peak is at most this fraction "
        "of the memory the device gives the process. Default: the device rule, (peak + CUDA "
        "context + NCCL buffers) x the model's median memory error on the framework's "
        "published runs at most that memory",
    )


def inputs_lines(found: Search) -> list[str]:
    return [
        f"seq len      {found.seq_len.value:,} tokens ({found.seq_len.source})",
        f"global batch {found.global_batch.value:,} sequences ({found.global_batch.source})",
    ]


def best_lines(found: Search, tokens: float | None) -> list[str]:
    """The best plan's lines, as `plan` and `estimate` print them."""
    from trainbudget.api.answers.sensitivity import range_json
    from trainbudget.cli.plan.plan_view import plan_lines
    from trainbudget.cli.plan.uncertainty_view import range_line
    from trainbudget.core.parallel.search.planner import why_best

    best, cluster = found.result.plans[0], found.cluster
    out = plan_lines(best, cluster, found.rule)
    rng = range_json(best, cluster.hardware.name, tokens)
    out.append(range_line(rng))
    if tokens is not None:
        seconds = tokens / best.time.tokens_per_second
        low, high = (t / SECONDS_PER_DAY for t in rng["time_seconds_range"].values())
        out.append(
            f"time         {seconds / SECONDS_PER_DAY:.2f} days ({low:.2f}-{high:.2f}) for "
            f"{tokens:.4g} tokens; {seconds * cluster.n_gpus / 3600:,.0f} GPU-hours"
        )
    out.append(f"why          {why_best(found.result)}")
    return out
