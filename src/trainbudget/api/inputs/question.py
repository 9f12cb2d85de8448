"""One question, one answer: the inputs `estimate`, `plan` and `report` share (sequence length,
global batch, the layout search's policy) read the same way, with the same defaults
(core.spec.defaults), and the planner run they share."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from trainbudget.api.inputs.choices import one_of
from trainbudget.api.inputs.layout import cluster_from_args, efficiency_from_args
from trainbudget.api.inputs.request import headroom_from_args
from trainbudget.api.inputs.values import positive_int
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.fits import FitsRule, allocated_limit_bytes, rule_for
from trainbudget.core.parallel.search.plan_space import Policy
from trainbudget.core.single.flops import RECOMPUTE_KINDS
from trainbudget.core.spec.defaults import (
    Chosen,
    default_global_batch,
    default_seq_len,
)
from trainbudget.core.spec.frameworks import GENERIC, Framework
from trainbudget.core.spec.hardware import Hardware
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.units import format_bytes

SEARCH_DEFAULTS = {
    "max_tp": None,
    "zero_stages": "0,1,2,3",
    "recompute_options": None,
    "allow_offload": False,
    "no_cp": False,
    "no_hsdp": False,
    "max_micro_batch": "16",
}
"""The options that only bound the layout search, as parsed when not given."""


def search_options_given(args: argparse.Namespace) -> dict[str, object]:
    """{'--max-tp': '4', ...}: the search-only options the user gave."""
    return {
        "--" + name.replace("_", "-"): getattr(args, name)
        for name, default in SEARCH_DEFAULTS.items()
        if getattr(args, name, default) != default
    }


def _recompute_options(args: argparse.Namespace) -> tuple[str, ...]:
    one = getattr(args, "recompute", None)
    if one is not None and args.recompute_options is not None:
        raise SpecError(
            "--recompute", one, "give either --recompute or --recompute-options, not both"
        )
    if one is not None:
        return (one_of("recompute", one, RECOMPUTE_KINDS),)
    if args.recompute_options is None:
        return Policy().recompute
    rec = tuple(args.recompute_options.split(","))
    if not rec or any(r not in RECOMPUTE_KINDS for r in rec):
        raise SpecError(
            "recompute_options",
            args.recompute_options,
            "must be a list of " + ", ".join(RECOMPUTE_KINDS),
        )
    return rec


def policy_from_args(args: argparse.Namespace) -> Policy:
    try:
        zero = tuple(int(z) for z in args.zero_stages.split(","))
    except ValueError:
        raise SpecError("zero_stages", args.zero_stages, "must be a list like 0,1,3") from None
    if not zero or any(z not in (0, 1, 2, 3) for z in zero):
        raise SpecError("zero_stages", args.zero_stages, "stages must be among 0, 1, 2, 3")
    return Policy(
        max_tp=positive_int("max_tp", args.max_tp) if args.max_tp else 0,
        zero_stages=zero,
        recompute=_recompute_options(args),
        allow_offload=args.allow_offload,
        allow_cp=not args.no_cp,
        hsdp=not args.no_hsdp,
        flash_attention=args.flash_attention is not False,
        max_micro_batch=positive_int("max_micro_batch", args.max_micro_batch),
        memory_headroom=headroom_from_args(args),
    )


def seq_len_from_args(args: argparse.Namespace, model: ModelSpec) -> Chosen:
    if args.seq_len:
        return Chosen(positive_int("seq_len", args.seq_len), "given: --seq-len")
    return default_seq_len(model)


def global_batch_from_args(args: argparse.Namespace, seq_len: int) -> Chosen:
    if args.global_batch is not None:
        return Chosen(positive_int("global_batch", args.global_batch), "given: --global-batch")
    return default_global_batch(seq_len)


@dataclass(frozen=True)
class Search:
    """A planner run and the inputs it was given, each with where it came from."""

    result: object  # core.parallel.search.planner.PlannerResult
    cluster: Cluster
    seq_len: Chosen
    global_batch: Chosen
    policy: Policy
    framework_row: str = GENERIC.name
    """The framework row the plans were searched for: the device rule's margin is its."""

    @property
    def rule(self) -> FitsRule:
        return rule_for(self.policy.memory_headroom, self.framework_row)

    def headroom_text(self) -> str:
        """The fits rule in words, for every memory line (a data-parallel plan's NCCL
        communicator counted; each further parallel axis adds one)."""
        rule, memory = self.rule, self.cluster.hardware.usable_memory_bytes
        limit = allocated_limit_bytes(memory, rule, 1)
        if rule.headroom is not None:
            return (
                f"{100 * rule.headroom:g} % of {format_bytes(memory)} the device gives = "
                f"{format_bytes(limit)} usable (--memory-headroom)"
            )
        return (
            f"{format_bytes(memory)} the device gives / margin {rule.error_margin:.3g} - CUDA "
            f"context and NCCL buffers = {format_bytes(limit)} usable (device rule)"
        )


def search_from_args(
    args: argparse.Namespace,
    model: ModelSpec,
    hardware: Hardware,
    n_gpus: int,
    framework: Framework,
    *,
    top: int,
) -> Search:
    """The fastest fitting layouts for the question the arguments ask: `plan`'s search, which
    `estimate` runs too when it is given GPUs and no layout."""
    from trainbudget.core.parallel.search.planner_fast import search_fast

    seq_len = seq_len_from_args(args, model)
    global_batch = global_batch_from_args(args, seq_len.value)
    policy = policy_from_args(args)
    cluster = cluster_from_args(args, hardware, n_gpus)
    result = search_fast(
        model,
        cluster,
        global_batch=global_batch.value,
        seq_len=seq_len.value,
        precision=get_precision(args.precision),
        optimizer=get_optimizer(args.optimizer),
        policy=policy,
        top=top,
        efficiency=efficiency_from_args(args, hardware),
        causal=args.causal,
        count_causal=args.count_causal,
        framework=framework,
    )
    return Search(result, cluster, seq_len, global_batch, policy, framework.name)


def inputs_json(found: Search) -> dict:
    """The question's inputs the answer depends on, each with its source."""
    return {
        "seq_len": found.seq_len.value,
        "seq_len_source": found.seq_len.source,
        "global_batch": found.global_batch.value,
        "global_batch_source": found.global_batch.source,
        "memory_headroom": found.policy.memory_headroom,
    }
