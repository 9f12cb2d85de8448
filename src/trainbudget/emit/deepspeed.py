"""A plan as a DeepSpeed 0.19.8 config (JSON, `deepspeed.initialize(config=...)`).

Keys and their types: deepspeed/runtime/constants.py and config.py (batch, optimizer,
torch_autocast), precision_config.py (bf16, fp16), zero/config.py and zero/offload_config.py
(zero_optimization), tensor_parallel/config.py (tensor_parallel.autotp_size),
activation_checkpointing/config.py, all of the deepspeed 0.19.8 sdist on PyPI. The model, its
shape, pipeline stages and which blocks are recomputed live in the user's code, not this file.
"""

from __future__ import annotations

import json

from trainbudget.emit.job import Emitted, Job, Option, check_emitted, refuse, table

ENGINE = "deepspeed"
VERSION = "0.19.8"
_RT = f"deepspeed {VERSION} (PyPI sdist) deepspeed/runtime/"


def _o(name: str, kind: type, carries: str, file: str, choices=()) -> Option:
    return Option(name=name, kind=kind, carries=carries, source=_RT + file, choices=choices)


OPTIONS = table(
    _o("train_batch_size", int, "global batch", "constants.py"),
    _o("train_micro_batch_size_per_gpu", int, "micro_batch", "constants.py"),
    _o("gradient_accumulation_steps", int, "grad_accum", "constants.py"),
    _o("bf16.enabled", bool, "precision bf16-mixed", "precision_config.py"),
    _o("fp16.enabled", bool, "precision fp16-mixed", "precision_config.py"),
    _o("torch_autocast.enabled", bool, "precision amp-*", "constants.py"),
    _o(
        "torch_autocast.dtype", str, "precision amp-*", "config.py", choices=("bfloat16", "float16")
    ),
    _o("zero_optimization.stage", int, "zero", "zero/config.py"),
    _o(
        "zero_optimization.offload_optimizer.device",
        str,
        "offload_optimizer",
        "zero/offload_config.py",
        choices=("cpu", "nvme"),
    ),
    _o(
        "zero_optimization.offload_param.device",
        str,
        "offload_params",
        "zero/offload_config.py",
        choices=("cpu", "nvme"),
    ),
    _o("tensor_parallel.autotp_size", int, "tp", "tensor_parallel/config.py"),
    _o(
        "optimizer.type",
        str,
        "optimizer",
        "config.py",
        choices=("Adam", "AdamW", "Lion", "Adagrad"),
    ),
    # Adam's adam_w_mode defaults to True (config.py ADAM_W_MODE_DEFAULT): plain Adam says no
    _o("optimizer.params.adam_w_mode", bool, "optimizer adam", "config.py"),
    _o(
        "activation_checkpointing.partition_activations",
        bool,
        "recompute",
        "activation_checkpointing/config.py",
    ),
)


def _checks(job: Job) -> None:
    p = job.plan
    if p.pp > 1:
        raise refuse(
            ENGINE,
            "pp",
            p.pp,
            "its pipeline is built in model code "
            "(deepspeed.pipe.PipelineModule) and runs ZeRO 0-1 only; try --emit "
            "megatron",
        )
    if p.cp > 1:
        raise refuse(
            ENGINE,
            "cp",
            p.cp,
            "its sequence parallelism (Ulysses) splits heads by "
            "all-to-all, not the sequence by ring attention; plan --no-cp to search without "
            "context parallelism, or try --emit megatron",
        )
    if p.sp:
        raise refuse(ENGINE, "sp", True, "AutoTP keeps norms and dropout whole on each rank")
    if p.ep > 1:
        raise refuse(
            ENGINE,
            "ep",
            p.ep,
            "expert parallelism is set in model code "
            "(deepspeed.moe.layer.MoE(ep_size=...)), not the config",
        )
    if p.zero_shard:
        raise refuse(
            ENGINE,
            "zero_shard",
            p.zero_shard,
            f"{VERSION} removed MiCS, its "
            "sharding within groups (config.py); hpZ shards the weights only",
        )
    if p.offload_optimizer != "none" and p.zero == 0:
        raise refuse(ENGINE, "offload_optimizer", p.offload_optimizer, "needs ZeRO 1-3")
    if p.offload_params != "none" and p.zero != 3:
        raise refuse(ENGINE, "offload_params", p.offload_params, "needs ZeRO-3")


def _precision(job: Job) -> dict[str, object]:
    table_ = {
        "bf16-mixed": {"bf16.enabled": True},
        "fp16-mixed": {"fp16.enabled": True},
        "fp32": {},
        "amp-bf16": {"torch_autocast.enabled": True, "torch_autocast.dtype": "bfloat16"},
        "amp-fp16": {"torch_autocast.enabled": True, "torch_autocast.dtype": "float16"},
    }
    if job.precision not in table_:
        raise refuse(
            ENGINE,
            "precision",
            job.precision,
            "the config trains fp32, bf16-mixed, "
            "fp16-mixed, amp-bf16 and amp-fp16 (FP8 is Transformer Engine in code)",
        )
    return dict(table_[job.precision])


def _optimizer(job: Job) -> dict[str, object]:
    names = {"adamw": "AdamW", "adam": "Adam", "lion": "Lion", "adagrad": "Adagrad"}
    if job.optimizer not in names:
        raise refuse(ENGINE, "optimizer", job.optimizer, f"it builds {', '.join(names)}")
    out: dict[str, object] = {"optimizer.type": names[job.optimizer]}
    if job.optimizer == "adam":
        out["optimizer.params.adam_w_mode"] = False
    return out


def values(job: Job) -> dict[str, object]:
    """The keys the plan sets, as dotted paths into the JSON."""
    _checks(job)
    p = job.plan
    out: dict[str, object] = {
        # DeepSpeed checks train_batch_size = micro * accum * data-parallel world size
        "train_batch_size": p.global_batch,
        "train_micro_batch_size_per_gpu": p.micro_batch,
        "gradient_accumulation_steps": p.grad_accum,
    }
    out |= _precision(job)
    out["zero_optimization.stage"] = p.zero
    if p.offload_optimizer != "none":
        out["zero_optimization.offload_optimizer.device"] = p.offload_optimizer
    if p.offload_params != "none":
        out["zero_optimization.offload_param.device"] = p.offload_params
    if p.tp > 1:
        out["tensor_parallel.autotp_size"] = p.tp
    out |= _optimizer(job)
    if p.recompute != "none":
        out["activation_checkpointing.partition_activations"] = False
    check_emitted(out, OPTIONS, ENGINE)
    return out


def nested(values: dict[str, object]) -> dict[str, object]:
    """{"a.b": 1} -> {"a": {"b": 1}}."""
    out: dict[str, object] = {}
    for dotted, v in values.items():
        *path, key = dotted.split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})  # type: ignore[assignment]
        node[key] = v
    return out


def _recompute_note(job: Job) -> str:
    p = job.plan
    which = {
        "none": "",
        "selective": "checkpoint the attention core (scores, softmax, dropout, x V) of each block",
        "selective-op": "checkpoint each block with torch's per-op policy (save matmul "
        "outputs, recompute the rest)",
        "full": "checkpoint every block"
        if p.recompute_every == 1
        else f"checkpoint every {p.recompute_every}-th block of each stage (the first, "
        f"{p.recompute_every + 1}-th, ...)",
    }[p.recompute]
    if not which:
        return ""
    return (
        f"deepspeed: recompute '{p.recompute}' is in model code: {which} "
        "(deepspeed.checkpointing.checkpoint)"
    )


def emit(job: Job) -> Emitted:
    text = json.dumps(nested(values(job)), indent=2) + "\n"
    notes = [
        f"deepspeed: the model ({job.model.name}, seq_len {job.seq_len}) is your code; "
        f"{job.model.n_layers} layers, d_model {job.model.d_model}",
        _recompute_note(job),
    ]
    return Emitted(
        engine=ENGINE,
        text=text,
        file_name="deepspeed.json",
        notes=tuple(n for n in notes if n),
    )
