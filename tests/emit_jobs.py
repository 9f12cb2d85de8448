"""Jobs for the emitter tests: the 70B / 1,024 H100 plan the README shows, and hand-made
plans that reach the other mappings (pipeline stages, ZeRO-1 and HSDP, MoE)."""

from __future__ import annotations

import argparse
import math
import shlex

from trainbudget.core.parallel.plan import Plan
from trainbudget.core.spec.presets import get_preset
from trainbudget.emit import megatron
from trainbudget.emit.job import Job

# the README's plan (`trainbudget plan --model llama-3-70b --gpus 1024 --gpu h100-sxm
# --global-batch 512 --seq-len 8192 --tokens 15T`): dp256 tp2+sp pp1 cp2 zero3 mb1x2
README_70B = Plan(dp=256, tp=2, sp=True, cp=2, zero=3, micro_batch=1, grad_accum=2)
STEPS_15T = math.ceil(15e12 / (512 * 8192))


def job(plan: Plan, model: str = "llama-3-70b", **kw) -> Job:
    base = dict(seq_len=8192, precision="bf16-mixed", optimizer="adamw", train_steps=None)
    return Job(model=get_preset(model), plan=plan, **(base | kw))


def megatron_parser() -> argparse.ArgumentParser:
    """An argparse parser of the options in megatron.OPTIONS (their names, types, choices:
    the schema written from Megatron-LM's arguments.py), unknown flags an error."""
    p = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for o in megatron.OPTIONS.values():
        if o.kind is bool:
            p.add_argument(o.name, action="store_true")
        else:
            p.add_argument(o.name, type=o.kind, choices=list(o.choices) or None)
    return p


def parse_megatron(text: str) -> argparse.Namespace:
    argv = shlex.split(" ".join(ln for ln in text.splitlines() if not ln.startswith("#")))
    return megatron_parser().parse_args(argv)
