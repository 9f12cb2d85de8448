"""A plan as a torchtitan 0.2.2 job config (TOML, read by `--job.config_file`).

0.2.2 is torchtitan's last release with TOML job configs (0.3.0 moved to Python config
registries). Option names and types: torchtitan/config/job_config.py of the 0.2.2 wheel on
PyPI; the rules that refuse a plan cite the module of the same wheel that sets them.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainbudget.core.parallel.pipeline_split import chunk_layer_counts
from trainbudget.emit.job import Emitted, Job, Option, check_emitted, refuse, table
from trainbudget.emit.toml_text import toml_text

ENGINE = "torchtitan"
VERSION = "0.2.2"
_PKG = f"torchtitan {VERSION} (PyPI wheel) torchtitan/"
_CFG = _PKG + "config/job_config.py"

OPTIONS = table(
    Option(name="model.name", kind=str, carries="model (by shape)", source=_CFG),
    Option(name="model.flavor", kind=str, carries="model (by shape)", source=_CFG),
    Option(name="model.converters", kind=list, carries="precision fp8", source=_CFG),
    Option(
        name="optimizer.name", kind=str, carries="optimizer", source=_CFG, choices=("Adam", "AdamW")
    ),  # components/optimizer.py: the two it builds
    Option(
        name="training.local_batch_size",
        kind=int,
        carries="micro_batch (x grad_accum with pp)",
        source=_CFG,
    ),
    Option(name="training.global_batch_size", kind=int, carries="global batch", source=_CFG),
    Option(name="training.seq_len", kind=int, carries="seq_len", source=_CFG),
    Option(name="training.steps", kind=int, carries="steps for --tokens", source=_CFG),
    Option(
        name="training.dtype",
        kind=str,
        carries="precision bf16 (no fp32 master)",
        source=_CFG,
        choices=("bfloat16", "float32"),
    ),
    Option(
        name="training.mixed_precision_param",
        kind=str,
        carries="precision",
        source=_CFG,
        choices=("bfloat16", "float32"),
    ),
    Option(
        name="training.enable_cpu_offload",
        kind=bool,
        carries="offload_params and offload_optimizer cpu",
        source=_CFG,
    ),
    Option(
        name="parallelism.data_parallel_replicate_degree",
        kind=int,
        carries="dp / shard group",
        source=_CFG,
    ),
    Option(
        name="parallelism.data_parallel_shard_degree",
        kind=int,
        carries="ZeRO shard group (zero_shard or dp)",
        source=_CFG,
    ),
    Option(
        name="parallelism.fsdp_reshard_after_forward",
        kind=str,
        carries="zero 3 / 2",
        source=_CFG,
        choices=("default", "always", "never"),
    ),
    Option(
        name="parallelism.tensor_parallel_degree", kind=int, carries="tp (with sp)", source=_CFG
    ),
    Option(name="parallelism.pipeline_parallel_degree", kind=int, carries="pp", source=_CFG),
    Option(
        name="parallelism.pipeline_parallel_schedule",
        kind=str,
        carries="schedule, vpp",
        source=_CFG,
        choices=("1F1B", "GPipe", "Interleaved1F1B"),
    ),
    Option(
        name="parallelism.pipeline_parallel_microbatch_size",
        kind=int,
        carries="micro_batch",
        source=_CFG,
    ),
    Option(
        name="parallelism.module_fqns_per_model_part",
        kind=list,
        carries="pp_layers, vpp (layers of each stage)",
        source=_CFG,
    ),
    Option(name="parallelism.context_parallel_degree", kind=int, carries="cp", source=_CFG),
    Option(
        name="activation_checkpoint.mode",
        kind=str,
        carries="recompute",
        source=_CFG,
        choices=("selective", "full", "none"),
    ),
    Option(
        name="activation_checkpoint.selective_ac_option",
        kind=str,
        carries="recompute_every / selective-op",
        source=_CFG,
    ),
)


@dataclass(frozen=True, kw_only=True)
class Flavor:
    """A model of torchtitan's registry, by the shape it builds."""

    name: str
    flavor: str
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab_size: int
    qk_norm: bool
    source: str


# d_ff of llama3: int(2 * 4 * dim / 3) * ffn_dim_multiplier rounded up to multiple_of
# (llama3/model/model.py FeedForward): 70B 28672, 8B 14336, 405B 53248
FLAVORS = (
    Flavor(
        name="llama3",
        flavor="8B",
        d_model=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        d_ff=14336,
        vocab_size=128256,
        qk_norm=False,
        source=_PKG + "models/llama3/__init__.py",
    ),
    Flavor(
        name="llama3",
        flavor="70B",
        d_model=8192,
        n_layers=80,
        n_heads=64,
        n_kv_heads=8,
        d_ff=28672,
        vocab_size=128256,
        qk_norm=False,
        source=_PKG + "models/llama3/__init__.py",
    ),
    Flavor(
        name="llama3",
        flavor="405B",
        d_model=16384,
        n_layers=126,
        n_heads=128,
        n_kv_heads=8,
        d_ff=53248,
        vocab_size=128256,
        qk_norm=False,
        source=_PKG + "models/llama3/__init__.py",
    ),
    Flavor(
        name="qwen3",
        flavor="8B",
        d_model=4096,
        n_layers=36,
        n_heads=32,
        n_kv_heads=8,
        d_ff=12288,
        vocab_size=151936,
        qk_norm=True,
        source=_PKG + "models/qwen3/__init__.py",
    ),
)
_SHAPE = ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "vocab_size", "qk_norm")


def _flavor(job: Job) -> Flavor:
    m = job.model
    plain = m.mlp == "swiglu" and m.norm == "rmsnorm" and m.position == "rope"
    plain = plain and not (m.tied_embeddings or m.bias or m.is_moe or m.is_mla)
    plain = plain and not (m.sliding_window or m.post_norms or m.qkv_bias)
    for f in FLAVORS:
        if plain and all(getattr(m, k) == getattr(f, k) for k in _SHAPE):
            return f
    known = ", ".join(f"{f.name}/{f.flavor}" for f in FLAVORS)
    raise refuse(
        ENGINE,
        "model",
        m.name,
        f"it builds a model by name and flavor, with no "
        f"shape overrides, and none has this shape (known here: {known})",
    )


def _data_parallel(job: Job) -> dict[str, object]:
    p = job.plan
    if p.zero == 1:
        raise refuse(
            ENGINE,
            "zero",
            1,
            "FSDP2 shards weights, gradients and optimizer "
            "state together (zero 2 or 3); try --zero-stages 0,2,3",
        )
    if p.zero == 0:
        if p.n_gpus != p.dp:  # models/llama3/infra/parallelize.py
            raise refuse(
                ENGINE,
                "zero",
                0,
                "its DDP runs only as the sole parallelism ('DDP "
                "has not supported > 1D parallelism'); with tp, pp or cp it shards",
            )
        return {
            "parallelism.data_parallel_replicate_degree": p.dp,
            "parallelism.data_parallel_shard_degree": 1,
        }
    shard = p.zero_shard or p.dp
    return {
        "parallelism.data_parallel_replicate_degree": p.dp // shard,
        "parallelism.data_parallel_shard_degree": shard,
        # "never" keeps the gathered weights from forward to backward: ZeRO-2's memory
        "parallelism.fsdp_reshard_after_forward": "always" if p.zero == 3 else "never",
    }


def _precision(job: Job) -> dict[str, object]:
    """FSDP2's mixed precision (bf16 compute copy of fp32 sharded weights) is bf16-mixed; DDP
    casts by torch.autocast over fp32 weights, which is amp-bf16 (job_config.py:
    mixed_precision_param's docstring)."""
    fsdp = job.plan.zero >= 2
    ok = ("bf16-mixed", "bf16", "fp8", "fp32") if fsdp else ("amp-bf16", "fp32")
    if job.precision not in ok:
        how = "FSDP (zero 2-3)" if fsdp else "DDP (zero 0)"
        raise refuse(ENGINE, "precision", job.precision, f"under {how} it trains {', '.join(ok)}")
    out: dict[str, object] = {
        "training.mixed_precision_param": "float32" if job.precision == "fp32" else "bfloat16"
    }
    if job.precision == "bf16":
        out["training.dtype"] = "bfloat16"  # no fp32 master copy
    if job.precision == "fp8":  # torchao float8 (components/quantization/float8.py)
        out["model.converters"] = ["quantize.linear.float8"]
    return out


def _stage_modules(job: Job) -> list[list[str]]:
    """The module names of each model part, first to last (pp * vpp parts; part i runs on
    rank i % pp, the looped order of distributed/pipeline_parallel.py)."""
    p, n = job.plan, job.model.n_layers
    per_stage = chunk_layer_counts(p, n)  # row s: stage s's chunks, as the core splits them
    counts = [per_stage[k % p.pp][k // p.pp] for k in range(p.pp * p.vpp)]
    parts, first = [], 0
    for c in counts:
        parts.append([f"layers.{i}" for i in range(first, first + c)])
        first += c
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return parts


def _pipeline(job: Job) -> dict[str, object]:
    p = job.plan
    if p.pp == 1:
        return {"training.local_batch_size": p.micro_batch}
    schedule = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}
    return {
        "training.local_batch_size": p.micro_batch * p.grad_accum,  # split into micro-batches
        "parallelism.pipeline_parallel_degree": p.pp,
        "parallelism.pipeline_parallel_schedule": schedule[p.schedule],
        "parallelism.pipeline_parallel_microbatch_size": p.micro_batch,
        "parallelism.module_fqns_per_model_part": _stage_modules(job),
    }


def _recompute(job: Job) -> dict[str, object]:
    p = job.plan
    if p.recompute == "selective":
        raise refuse(
            ENGINE,
            "recompute",
            "selective",
            "its selective modes are per layer "
            "('K') or per op ('op'), not the attention core (try selective-op)",
        )
    if p.recompute == "none":
        return {"activation_checkpoint.mode": "none"}
    if p.recompute == "selective-op":
        return {
            "activation_checkpoint.mode": "selective",
            "activation_checkpoint.selective_ac_option": "op",
        }
    if p.recompute_every == 1:
        return {"activation_checkpoint.mode": "full"}
    # distributed/activation_checkpoint.py _apply_layer_sac wraps the K-th, 2K-th, ... layer
    # a rank builds: floor(L / K) of them, the plan's ceil(L / K) only when K divides L
    per_rank = [sum(row) for row in chunk_layer_counts(p, job.model.n_layers)]
    if any(c % p.recompute_every for c in per_rank):
        raise refuse(
            ENGINE,
            "recompute_every",
            p.recompute_every,
            f"it recomputes every "
            f"K-th layer of a rank's {per_rank} from the K-th on, floor(L / K), not "
            "ceil(L / K); K must divide each",
        )
    return {
        "activation_checkpoint.mode": "selective",
        "activation_checkpoint.selective_ac_option": str(p.recompute_every),
    }


def _checks(job: Job) -> None:
    p = job.plan
    if p.tp > 1 and not p.sp:  # models/llama3/infra/parallelize.py apply_tp
        raise refuse(
            ENGINE,
            "sp",
            False,
            "its tensor parallelism always splits the norms "
            "along the sequence (sequence parallelism); plan with sp",
        )
    divisor = p.tp * 2 * p.cp  # distributed/parallel_dims.py seq_len_divisor
    if job.seq_len % divisor:
        raise refuse(
            ENGINE, "seq_len", job.seq_len, f"it must be divisible by tp * 2 * cp = {divisor}"
        )
    if not p.flash_attention:
        raise refuse(
            ENGINE,
            "flash_attention",
            False,
            "its attention is SDPA or flex attention, which never stores the s x s matrix",
        )
    if p.offload_optimizer != p.offload_params or p.offload_params not in ("none", "cpu"):
        raise refuse(
            ENGINE,
            "offload",
            f"{p.offload_optimizer}/{p.offload_params}",
            "its FSDP CPU offload moves weights, gradients and optimizer state "
            "together, to CPU only",
        )
    if job.optimizer not in ("adam", "adamw"):
        raise refuse(ENGINE, "optimizer", job.optimizer, "it builds Adam and AdamW only")


def values(job: Job) -> dict[str, object]:
    """The options the plan sets, by their TOML `section.key`."""
    _checks(job)
    p, flavor, data_parallel = job.plan, _flavor(job), _data_parallel(job)
    out: dict[str, object] = {"model.name": flavor.name, "model.flavor": flavor.flavor}
    out["optimizer.name"] = {"adam": "Adam", "adamw": "AdamW"}[job.optimizer]
    out.update(_pipeline(job))
    out["training.global_batch_size"] = p.global_batch
    out["training.seq_len"] = job.seq_len
    if job.train_steps is not None:
        out["training.steps"] = job.train_steps
    out.update(_precision(job))
    if p.offload_params == "cpu":
        out["training.enable_cpu_offload"] = True
    out.update(data_parallel)
    out["parallelism.tensor_parallel_degree"] = p.tp
    out["parallelism.context_parallel_degree"] = p.cp
    out.update(_recompute(job))
    check_emitted(out, OPTIONS, ENGINE)
    return out


def emit(job: Job) -> Emitted:
    header = [
        f"torchtitan {VERSION} job config for the plan {job.plan.describe()} "
        f"({job.model.name}, seq_len {job.seq_len}, {job.precision}), by trainbudget plan",
        "run: torchrun ... -m torchtitan.train --job.config_file THIS_FILE",
    ]
    return Emitted(
        engine=ENGINE,
        text=toml_text(values(job), header),
        file_name="torchtitan.toml",
        notes=(
            "torchtitan: set model.hf_assets_path (tokenizer) and training.dataset "
            "yourself; optimizer and learning-rate values are torchtitan's defaults",
        ),
    )
