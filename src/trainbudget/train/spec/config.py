"""What a training run is: one frozen dataclass, from a settings file (TOML or JSON, read as data,
never executed: `config_files`) and/or command-line flags, validated in one place when it is made
(`config_checks`). Defaults train a small model on the embedded corpus on a CPU in a few minutes.

Rules that need a file (the model, the data folder, a plan, probes) are `preflight.preflight`'s."""

from __future__ import annotations

import ast
import dataclasses
import functools
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

from trainbudget.core.errors import SpecError
from trainbudget.train.spec.config_checks import check_ranges, check_together


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    model: str = "gpt2"
    """A preset (`trainbudget models`) or a Hugging Face config.json; changed by overrides."""
    overrides: tuple[str, ...] = (
        "n_layers=4",
        "d_model=128",
        "n_heads=4",
        "d_ff=512",
        "vocab_size=257",
        "max_seq_len=256",
    )
    """`field=value` changes to the model. The default makes gpt2 a 1M-parameter byte-level GPT;
    a settings file or flags that name a model and no overrides get none. On the command line,
    each --set changes one field of those (the default's, the file's, or --model's)."""
    data: str = ""
    """A directory from `trainbudget data prepare`; empty: the embedded corpus, prepared once
    into <out>/data with the byte tokenizer."""
    out: str = "runs/default"
    """The run's folder: config, metrics, checkpoints, summary."""
    steps: int = 300
    """Optimizer steps in the whole run."""
    micro_batch: int = 16
    """Sequences per forward/backward pass on each process."""
    grad_accum: int = 1
    """Micro-batches whose gradients are summed before each optimizer step."""
    seq_len: int = 128
    """Tokens per training sequence."""
    lr: float = 3e-3
    """Peak learning rate (after warmup)."""
    min_lr_ratio: float = 0.1
    """The final learning rate as a fraction of lr, in [0, 1]."""
    warmup_steps: int = -1
    """Steps of linear warmup, 0 to steps (-1: a tenth of the steps)."""
    schedule: str = "cosine"
    """The learning-rate decay after warmup."""
    optimizer: str = "adamw"
    """The update rule."""
    weight_decay: float = 0.1
    """Decoupled weight decay (AdamW) or L2 penalty, >= 0."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this (0: no clipping)."""
    precision: str = "fp32"
    """Weights and compute: fp32; bf16-mixed (bf16 weights, fp32 master copy); bf16; amp-*
    (fp32 weights, 16-bit matmuls under autocast)."""
    device: str = "auto"
    """auto: a GPU when one is usable, else the CPU."""
    recompute: str = "none"
    """Activation recomputation: none, or full (each block's forward again in backward)."""
    compile: bool = False
    """torch.compile the model."""
    memory_check: bool = True
    """Before building the model, refuse a run whose predicted peak memory per process exceeds
    what the device has free (CPU: MemAvailable, shared by the run's processes; GPU: free
    memory), naming a setting that fits; --no-memory-check starts anyway."""
    seed: int = 1337
    """Seeds Python, numpy and torch and the data order, in [0, 2**32)."""
    log_interval: int = 10
    """Log (and measure) every N steps, and the last step."""
    eval_interval: int = 100
    """Evaluate on the held-out split every N steps (a multiple of log_interval), and at the
    end."""
    eval_batches: int = 8
    """Held-out batches per evaluation."""
    probes: str = ""
    """A TSV file of `prompt<TAB>target` pairs whose probability is tracked (empty: none)."""
    strategy: str = "ddp"
    """Under torchrun: ddp (replicated, ZeRO-0), zero1 (DDP + ZeroRedundancyOptimizer: optimizer
    state sharded), zero2 (FSDP2 without resharding after forward, the closest exact ZeRO-2:
    gradients and optimizer state sharded, parameters gathered from forward to backward), fsdp
    (FSDP2, ZeRO-3) or hsdp (FSDP2 on a 2-D mesh: ZeRO-3 in groups of zero_shard ranks)."""
    zero_shard: int = 0
    """hsdp: ranks per shard group (it must divide the processes); 0 for the other strategies."""
    tp: int = 1
    """Under torchrun: tensor-parallel degree, ranks that split every layer's weights (DTensor,
    train.parallel.tensor_parallel); it must divide the processes, the heads, the kv heads, d_ff and
    the vocabulary. The strategy runs over the processes / tp data-parallel ranks."""
    sequence_parallel: bool = False
    """With tp > 1: split the norms' and the residual stream's activations along the sequence
    over the tp ranks (Korthikanti et al. 2022, arXiv:2205.05198)."""
    cp: int = 1
    """Under torchrun: context-parallel degree, ranks that split every sequence between them
    (each holds 2 of its 2 cp chunks; attention all-gathers the keys and values,
    train.parallel.context); it must divide the processes, and 2 cp must divide seq_len.
    Gradients are averaged over the dp x cp ranks."""
    ep: int = 1
    """MoE models, under torchrun: expert-parallel degree -- each MoE layer's routed experts split
    over groups of ep data-parallel ranks, tokens sent to their experts' ranks by all-to-all
    (train.parallel.expert_parallel); it must divide n_experts and the processes. Strategies ddp,
    zero2 and fsdp."""
    pp: int = 1
    """Pipeline stages across ranks (torch.distributed.pipelining): it must divide the
    processes; the data-parallel strategy runs over the processes / pp ranks of each stage."""
    pp_schedule: str = "1f1b"
    """pp > 1: the pipeline schedule, gpipe, 1f1b or interleaved-1f1b (vpp stages per rank);
    its micro-batches are the grad_accum micro-batches of each step."""
    vpp: int = 1
    """pp > 1: virtual stages per pipeline rank (>= 2 for interleaved-1f1b, else 1)."""
    pp_layers: str = ""
    """pp > 1: layers of each stage, first to last, comma-separated (pp * vpp entries summing
    to n_layers); empty: an even split."""
    collective_timeout_seconds: float = 600.0
    """Under torchrun: how long a rank waits for the others -- at rendezvous and in every
    collective -- before it exits with code 3, naming the ranks that did not arrive."""
    plan: str = ""
    """A JSON file from `trainbudget plan --json`: its best layout is used (empty: none). Data,
    tensor, pipeline, context and expert parallel (expert parallel for MoE, its groups carved out
    of the data-parallel ranks) with dp x tp x pp x cp = the number of processes; it decides
    strategy (ZeRO 0, 1, 2, 3 -> ddp, zero1, zero2, fsdp; a zero_shard -> hsdp), zero_shard,
    micro_batch, grad_accum, tp, sequence_parallel, cp and ep, and with pp > 1 pp, pp_schedule,
    vpp and pp_layers (giving others is an error)."""
    resume: bool = False
    """Continue from the newest verified checkpoint in <out>/checkpoints (start afresh if none)."""
    overwrite: bool = False
    """Start afresh in an --out that holds an earlier run, deleting its checkpoints, metrics,
    summary and TensorBoard files (its prepared data stays); without it such an --out is
    refused unless resume is set."""
    tensorboard: bool = True
    """Also write TensorBoard event files."""
    checkpoint_every: int = 100
    """Save a checkpoint every N steps (0: only at the end and on SIGTERM/SIGINT)."""
    checkpoint_minutes: float | str = 0.0
    """Also save when this many minutes passed since the last save (0: off); "auto": the
    Young-Daly interval sqrt(2 x write time x job MTBF) from the measured write time."""
    gpu_failure_rate_per_day: float = 0.0027
    """Per-device failure probability per day, for checkpoint_minutes = "auto" (seed 004:
    8 % of GPUs per month = 0.27 % per day)."""
    keep: int = 3
    """How many checkpoints to keep (>= 2; the newest valid one is never deleted)."""
    on_nonfinite: str = "skip"
    """A NaN/inf loss or gradient norm: 'skip' the step (counted) or 'halt' the run."""
    max_consecutive_skips: int = 20
    """Halt when this many steps in a row were skipped (the run cannot recover by itself)."""
    spike_window: int = 50
    """Loss-spike detection over the last N step losses (0: off; else >= 8)."""
    spike_sigmas: float = 6.0
    """A spike: loss above the window's median by more than this many robust standard
    deviations (1.4826 x median absolute deviation) and by spike_min_excess of the median."""
    spike_min_excess: float = 0.1
    """The least excess over the window's median that counts as a spike, as a fraction of it."""
    max_rollbacks: int = 3
    """Spike remedy (roll back to the last checkpoint, skip the offending batches) at most this
    many times; then the run halts."""
    moe_capacity_factor: float = 1.25
    """MoE models: each expert takes at most this times its even share of a micro-batch's
    token-expert assignments and drops the rest, which pass on through the residual (Switch
    Transformer, arXiv:2101.03961, Sec. 2.2; its Table 1 compares 1.0, 1.25 and 2.0); 0:
    dropless. It becomes the model's capacity_factor, which the predictions read too; the
    count dropped is logged."""
    moe_balance_loss_coef: float = 0.01
    """MoE models: the weight of the load-balancing loss E x sum_i f_i x P_i, per MoE layer
    (Switch Transformer eq. 4; its alpha = 0.01)."""
    moe_z_loss_coef: float = 0.001
    """MoE models: the weight of the router z-loss, per MoE layer (ST-MoE, arXiv:2202.08906,
    eq. 5; its c_z = 0.001)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, checked_value(f.name, getattr(self, f.name)))
        if self.warmup_steps == -1:
            object.__setattr__(self, "warmup_steps", self.steps // 10)
        check_ranges(self)
        check_together(self)

    @property
    def run_dir(self) -> Path:
        return Path(self.out)


# ---- types ----------------------------------------------------------------------------------

_KIND_RULES = {
    "int": "must be an integer",
    "float": "must be a number",
    "str": "must be a string",
    "bool": "must be true or false",
    "tuple[str, ...]": 'must be a list of "field=value" strings',
    "float | str": 'must be a number of minutes or "auto"',
}


def checked_value(name: str, value: object) -> object:
    """`value` as field `name`'s type (an int for a float field becomes a float, a list of
    strings for `overrides` a tuple), or a SpecError naming the field: no bool for a number,
    no float for an integer, no number for a string."""
    kind = config_fields()[name].type
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "int" and number and isinstance(value, int):
        return value
    if kind == "str" and isinstance(value, str):
        return value
    if kind in ("float", "float | str") and number:
        if not math.isfinite(value):
            raise SpecError(name, value, "must be a finite number")
        return float(value)
    if kind == "float | str" and value == "auto":
        return value
    if (
        kind == "tuple[str, ...]"
        and isinstance(value, (list, tuple))
        and all(isinstance(v, str) for v in value)
    ):
        return tuple(value)
    raise SpecError(name, value, _KIND_RULES[kind])


@functools.cache
def config_fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(TrainConfig)}


@functools.cache
def field_docs() -> dict[str, str]:
    """Each field's docstring (the string literal under it in TrainConfig), read from this
    file's source with `ast`: the CLI's help text, written once, beside the field."""
    try:
        tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    except OSError:  # installed without sources (bytecode only): help without the docstrings
        return {}
    body = next(n.body for n in tree.body if getattr(n, "name", "") == "TrainConfig")
    docs = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs
