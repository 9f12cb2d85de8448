"""A plan as Megatron-LM arguments for pretrain_gpt.py, one option a line.

Version: Megatron-LM commit d98e8a6 (megatron-core 0.20.0), the tree `core/spec/frameworks.py`
cites. Options and their types: megatron/training/arguments.py of that commit (many are made by
its ArgumentGroupFactory from megatron/core/transformer/transformer_config.py and
megatron/core/model_parallel_config.py; the names are argparse's, as `--help` lists them).
"""

from __future__ import annotations

import math

from trainbudget.core.parallel.pipeline_split import chunk_layer_counts, end_slots
from trainbudget.emit.job import Emitted, Job, Option, check_emitted, refuse, table

ENGINE = "megatron"
VERSION = "Megatron-LM d98e8a6 (megatron-core 0.20.0)"
_ARGS = "Megatron-LM d98e8a6 megatron/training/arguments.py"
_TC = _ARGS + " (from megatron/core/transformer/transformer_config.py)"
_PC = _ARGS + " (from megatron/core/model_parallel_config.py)"


def _o(name: str, kind: type, carries: str, source: str = _ARGS, choices=()) -> Option:
    return Option(name=name, kind=kind, carries=carries, source=source, choices=choices)


OPTIONS = table(
    _o("--tensor-model-parallel-size", int, "tp", _PC),
    _o("--sequence-parallel", bool, "sp", _PC),
    _o("--pipeline-model-parallel-size", int, "pp", _PC),
    _o("--num-layers-per-virtual-pipeline-stage", int, "n_layers / (pp * vpp)"),
    _o("--num-virtual-stages-per-pipeline-rank", int, "vpp (an uneven or accounted split)"),
    _o("--account-for-embedding-in-pipeline-split", bool, "embedding_in_pp_split"),
    _o("--account-for-loss-in-pipeline-split", bool, "loss_in_pp_split"),
    _o("--decoder-first-pipeline-num-layers", int, "pp_layers[0]"),
    _o("--decoder-last-pipeline-num-layers", int, "pp_layers[-1]"),
    _o("--context-parallel-size", int, "cp", _PC),
    _o("--expert-model-parallel-size", int, "ep", _PC),
    _o("--use-distributed-optimizer", bool, "zero >= 1"),
    _o("--num-distributed-optimizer-instances", int, "dp / zero_shard (zero 1)"),
    _o("--use-megatron-fsdp", bool, "zero 2-3"),
    _o(
        "--data-parallel-sharding-strategy",
        str,
        "zero 2-3",
        choices=("optim_grads", "optim_grads_params"),
    ),
    _o("--ckpt-format", str, "zero 2-3 (Megatron-FSDP's format)", choices=("fsdp_dtensor",)),
    _o("--use-precision-aware-optimizer", bool, "offload_optimizer cpu"),
    _o("--optimizer-cpu-offload", bool, "offload_optimizer cpu"),
    _o("--micro-batch-size", int, "micro_batch"),
    _o("--global-batch-size", int, "micro_batch * grad_accum * dp"),
    _o("--seq-length", int, "seq_len"),
    _o("--max-position-embeddings", int, "max_seq_len"),
    _o("--train-iters", int, "steps for --tokens"),
    _o("--num-layers", int, "n_layers", _TC),
    _o("--hidden-size", int, "d_model", _TC),
    _o("--ffn-hidden-size", int, "d_ff", _TC),
    _o("--num-attention-heads", int, "n_heads", _TC),
    _o("--kv-channels", int, "d_head", _TC),
    _o("--group-query-attention", bool, "n_kv_heads < n_heads"),
    _o("--num-query-groups", int, "n_kv_heads", _TC),
    _o("--vocab-size", int, "vocab_size"),
    _o("--swiglu", bool, "mlp swiglu"),
    _o("--normalization", str, "norm", _TC, choices=("LayerNorm", "RMSNorm")),
    _o("--position-embedding-type", str, "position", choices=("learned_absolute", "rope")),
    _o("--untie-embeddings-and-output-weights", bool, "tied_embeddings False"),
    _o("--disable-bias-linear", bool, "bias False", _TC),
    _o("--add-qkv-bias", bool, "qkv_bias", _TC),
    _o("--qk-layernorm", bool, "qk_norm", _TC),
    _o("--num-experts", int, "n_experts", _TC),
    _o("--moe-router-topk", int, "experts_per_token", _TC),
    _o("--moe-ffn-hidden-size", int, "d_ff_expert", _TC),
    _o("--moe-shared-expert-intermediate-size", int, "n_shared_experts * d_ff_expert", _TC),
    _o("--moe-layer-freq", str, "n_dense_layers (a Python list expression)", _TC),
    _o("--moe-router-enable-expert-bias", bool, "router_bias", _TC),
    _o("--multi-latent-attention", bool, "kv_lora_rank > 0"),
    _o("--q-lora-rank", int, "q_lora_rank", _TC),
    _o("--kv-lora-rank", int, "kv_lora_rank", _TC),
    _o("--qk-head-dim", int, "head_dim - rope_head_dim (MLA)", _TC),
    _o("--qk-pos-emb-head-dim", int, "rope_head_dim (MLA)", _TC),
    _o("--v-head-dim", int, "v_head_dim (MLA)", _TC),
    _o("--bf16", bool, "precision bf16-mixed, fp8"),
    _o("--fp16", bool, "precision fp16-mixed"),
    _o("--fp8-format", str, "precision fp8", _TC, choices=("e4m3", "hybrid")),
    _o("--recompute-granularity", str, "recompute", _TC, choices=("full", "selective")),
    _o("--recompute-method", str, "recompute full", _TC, choices=("uniform", "block")),
    _o("--recompute-num-layers", int, "recompute_every", _TC),
    _o("--attention-backend", str, "flash_attention False", _TC, choices=("unfused",)),
    _o("--optimizer", str, "optimizer", choices=("adam", "sgd", "lion")),
)


def _parallel(job: Job) -> dict[str, object]:
    p, n = job.plan, job.model.n_layers
    out: dict[str, object] = {"--tensor-model-parallel-size": p.tp}
    if p.sp:
        out["--sequence-parallel"] = True
    out["--pipeline-model-parallel-size"] = p.pp
    if p.schedule == "gpipe" and p.pp > 1:
        raise refuse(ENGINE, "schedule", "gpipe", "it runs 1F1B, or interleaved 1F1B with vpp")
    embedding, loss = end_slots(p)
    if p.vpp > 1 and (p.pp_layers or embedding or loss):
        # each stage's layers (and counted slots) shared among its chunks, as the core splits
        out["--num-virtual-stages-per-pipeline-rank"] = p.vpp
    elif p.vpp > 1:
        out["--num-layers-per-virtual-pipeline-stage"] = n // (p.pp * p.vpp)
    if embedding:
        out["--account-for-embedding-in-pipeline-split"] = True
    if loss:
        out["--account-for-loss-in-pipeline-split"] = True
    if p.pp_layers and (embedding or loss):
        raise refuse(
            ENGINE,
            "pp_layers",
            p.pp_layers,
            "this emitter writes either first/last-stage layer counts or the embedding/loss "
            "accounting flags, not both; give one",
        )
    if p.pp_layers:
        first, *middle, last = p.pp_layers
        if len(set(middle)) > 1:
            raise refuse(
                ENGINE,
                "pp_layers",
                p.pp_layers,
                "it splits the middle stages "
                "evenly (--decoder-first/last-pipeline-num-layers set the ends)",
            )
        out["--decoder-first-pipeline-num-layers"] = first
        out["--decoder-last-pipeline-num-layers"] = last
    out["--context-parallel-size"] = p.cp
    if p.ep > 1:  # experts keep tp: --expert-tensor-parallel-size defaults to tp
        out["--expert-model-parallel-size"] = p.ep
    return out


def _sharding(job: Job) -> dict[str, object]:
    """ZeRO 1: the distributed optimizer (sharded over dp * cp, or over instances of
    zero_shard ranks); ZeRO 2-3: Megatron-FSDP, which v1 runs on the distributed optimizer."""
    p = job.plan
    out: dict[str, object] = {}
    if p.zero >= 1:
        out["--use-distributed-optimizer"] = True
    if p.zero == 1 and p.zero_shard:
        out["--num-distributed-optimizer-instances"] = p.dp // p.zero_shard
    if p.zero >= 2:
        if p.zero_shard:
            raise refuse(
                ENGINE,
                "zero_shard",
                p.zero_shard,
                "this emitter maps HSDP only "
                "for zero 1 (distributed-optimizer instances), not Megatron-FSDP",
            )
        out["--use-megatron-fsdp"] = True
        strategy = "optim_grads_params" if p.zero == 3 else "optim_grads"
        out["--data-parallel-sharding-strategy"] = strategy
        out["--ckpt-format"] = "fsdp_dtensor"  # arguments.py asserts it with Megatron-FSDP
    if p.offload_params != "none" or p.offload_optimizer == "nvme":
        raise refuse(
            ENGINE,
            "offload",
            f"{p.offload_optimizer}/{p.offload_params}",
            "it offloads only the optimizer, to CPU",
        )
    if p.offload_optimizer == "cpu":
        if p.zero != 1:
            raise refuse(
                ENGINE,
                "offload_optimizer",
                "cpu",
                "its CPU optimizer offload runs on the distributed optimizer: plan with zero 1",
            )
        out["--use-precision-aware-optimizer"] = True  # arguments.py asserts it with offload
        out["--optimizer-cpu-offload"] = True
    return out


def _batch(job: Job) -> dict[str, object]:
    p, m = job.plan, job.model
    if m.position == "learned" and job.seq_len > m.max_seq_len:
        raise refuse(
            ENGINE,
            "seq_len",
            job.seq_len,
            f"learned positions stop at max_seq_len ({m.max_seq_len})",
        )
    out: dict[str, object] = {
        "--micro-batch-size": p.micro_batch,
        "--global-batch-size": p.global_batch,  # Megatron derives grad_accum from it
        "--seq-length": job.seq_len,
        "--max-position-embeddings": max(m.max_seq_len, job.seq_len),
    }
    if job.train_steps is not None:
        out["--train-iters"] = job.train_steps
    return out


def _shape(job: Job) -> dict[str, object]:
    m = job.model
    for field, bad in (
        ("position", m.position == "alibi"),
        ("sliding_window", m.sliding_window),
        ("post_norms", m.post_norms),
        ("gate_activation", m.mlp == "swiglu" and m.gate_activation != "silu"),
    ):
        if bad:
            raise refuse(ENGINE, field, getattr(m, field), "not mapped to a Megatron option")
    out: dict[str, object] = {
        "--num-layers": m.n_layers,
        "--hidden-size": m.d_model,
        "--ffn-hidden-size": m.d_ff,
        "--num-attention-heads": m.n_heads,
        "--vocab-size": m.vocab_size,
        "--normalization": "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm",
        "--position-embedding-type": "rope" if m.position == "rope" else "learned_absolute",
    }
    if not m.is_mla:
        out["--kv-channels"] = m.d_head
    if m.n_kv_heads != m.n_heads and not m.is_mla:
        out["--group-query-attention"] = True
        out["--num-query-groups"] = m.n_kv_heads
    flags = {
        "--swiglu": m.mlp == "swiglu",
        "--untie-embeddings-and-output-weights": not m.tied_embeddings,
        "--disable-bias-linear": not m.bias,
        "--add-qkv-bias": m.qkv_bias and not m.bias,
        "--qk-layernorm": m.qk_norm,
    }
    out.update({k: True for k, on in flags.items() if on})
    return out | _moe(job) | _mla(job)


def _moe(job: Job) -> dict[str, object]:
    m = job.model
    if not m.is_moe:
        return {}
    out: dict[str, object] = {
        "--num-experts": m.n_experts,
        "--moe-router-topk": m.experts_per_token,
        "--moe-ffn-hidden-size": m.d_ff_expert,
    }
    if m.n_shared_experts:
        out["--moe-shared-expert-intermediate-size"] = m.n_shared_experts * m.d_ff_expert
    if m.n_dense_layers:
        out["--moe-layer-freq"] = f"([0]*{m.n_dense_layers}+[1]*{m.n_moe_layers})"
    if m.router_bias:
        out["--moe-router-enable-expert-bias"] = True
    return out


def _mla(job: Job) -> dict[str, object]:
    m = job.model
    if not m.is_mla:
        return {}
    out: dict[str, object] = {
        "--multi-latent-attention": True,
        "--kv-lora-rank": m.kv_lora_rank,
        "--qk-head-dim": m.d_head - m.rope_head_dim,
        "--qk-pos-emb-head-dim": m.rope_head_dim,
        "--v-head-dim": m.d_v_head,
    }
    if m.q_lora_rank:
        out["--q-lora-rank"] = m.q_lora_rank
    return out


def _precision(job: Job) -> dict[str, object]:
    flags = {
        "bf16-mixed": {"--bf16": True},
        "fp16-mixed": {"--fp16": True},
        "fp32": {},
        "fp8": {"--bf16": True, "--fp8-format": "hybrid"},
    }  # E4M3 forward, E5M2 grads
    if job.precision not in flags:
        raise refuse(
            ENGINE,
            "precision",
            job.precision,
            "it trains fp32, bf16-mixed, "
            "fp16-mixed and fp8 (always with an fp32 master copy, never autocast)",
        )
    return dict(flags[job.precision])


def _recompute_block(job: Job) -> int:
    """Layers of each (virtual) stage that --recompute-method block recomputes (the first N
    of each, the rest keep everything), for the plan's ceil(L / K) per stage."""
    p, n = job.plan, job.model.n_layers
    k = p.recompute_every
    chunks = chunk_layer_counts(p, n)  # row s: stage s's chunks, as the core splits them
    per_stage = [sum(row) for row in chunks]
    wanted = {math.ceil(c / k) for c in per_stage}
    per_chunk = math.ceil(max(map(max, chunks)) / k) if p.vpp > 1 else min(wanted)
    if len(wanted) > 1 or p.vpp * per_chunk != min(wanted):
        raise refuse(
            ENGINE,
            "recompute_every",
            k,
            f"--recompute-num-layers is one count per "
            f"(virtual) stage; the plan recomputes {sorted(wanted)} of stages "
            f"{per_stage} ({p.vpp} chunk(s) each)",
        )
    return per_chunk


def _recompute(job: Job) -> dict[str, object]:
    p = job.plan
    if p.recompute == "none":
        return {}
    if p.recompute == "selective":  # default --recompute-modules core_attn
        return {"--recompute-granularity": "selective"}
    if p.recompute == "selective-op":
        raise refuse(
            ENGINE,
            "recompute",
            "selective-op",
            "its selective recomputation picks "
            "modules (--recompute-modules), not torch's per-op save policy",
        )
    if p.recompute_every == 1:
        return {
            "--recompute-granularity": "full",
            "--recompute-method": "uniform",
            "--recompute-num-layers": 1,
        }
    return {
        "--recompute-granularity": "full",
        "--recompute-method": "block",
        "--recompute-num-layers": _recompute_block(job),
    }


def _optimizer(job: Job) -> dict[str, object]:
    # Megatron's adam is decoupled weight decay (AdamW); weight decay 0 makes it Adam's
    names = {"adamw": "adam", "adam": "adam", "sgd": "sgd", "lion": "lion"}
    if job.optimizer not in names:
        raise refuse(ENGINE, "optimizer", job.optimizer, f"it builds {', '.join(names)}")
    return {"--optimizer": names[job.optimizer]}


def values(job: Job) -> dict[str, object]:
    """The arguments the plan sets: a flag's value, or True for a switch."""
    out = _parallel(job) | _sharding(job) | _batch(job) | _shape(job) | _precision(job)
    out |= _recompute(job) | _optimizer(job)
    if not job.plan.flash_attention:
        out["--attention-backend"] = "unfused"
    check_emitted(out, OPTIONS, ENGINE)
    return out


def args_text(values: dict[str, object], header: list[str]) -> str:
    lines = [f"# {h}" for h in header]
    lines += [k if v is True else f"{k} {v}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def emit(job: Job) -> Emitted:
    header = [
        f"Megatron-LM arguments ({VERSION}) for the plan {job.plan.describe()} "
        f"({job.model.name}, {job.precision}), by trainbudget plan",
        "run: torchrun ... pretrain_gpt.py $(grep -v '^#' THIS_FILE) --data-path ... "
        "--tokenizer-type ...",
    ]
    return Emitted(
        engine=ENGINE,
        text=args_text(values(job), header),
        file_name="megatron.args",
        notes=(
            "megatron: add the data and tokenizer arguments; Megatron pads the vocabulary to "
            "a multiple of --make-vocab-size-divisible-by (128) x tp; the data-parallel size "
            "and the gradient accumulation follow from the world size and --global-batch-size",
            *_env_notes(job),
        ),
    )


def _env_notes(job: Job) -> tuple[str, ...]:
    """arguments.py validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with tp or cp on
    pre-Blackwell GPUs unless Megatron-FSDP runs (then it only warns)."""
    p = job.plan
    if (p.tp > 1 or p.cp > 1) and p.zero < 2:
        return (
            "megatron: export CUDA_DEVICE_MAX_CONNECTIONS=1 (required with tp or cp "
            "before Blackwell)",
        )
    return ()
