"""One training-run estimate: parameters, FLOPs, memory, time and cost, with every step shown.

`estimate(request)` is pure; it returns typed breakdowns plus a list of `Step`s (formula, the
numbers put into it, the result) that `--explain` prints the way the seeds derive them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trainbudget.core.errors import SpecError
from trainbudget.core.single.flops import TrainingFlops, training_flops
from trainbudget.core.single.memory import MemoryBreakdown, checkpoint_bytes
from trainbudget.core.single.one_gpu_memory import one_gpu_memory
from trainbudget.core.single.params import ParamBreakdown, count_params
from trainbudget.core.single.training_time import TrainingTime, training_time
from trainbudget.core.spec.defaults import (
    DEFAULT_FLASH_ATTENTION,
    DEFAULT_OPTIMIZER,
    DEFAULT_PRECISION,
    default_seq_len,
)
from trainbudget.core.spec.hardware import Hardware
from trainbudget.core.spec.model_spec import BareModel, ModelSpec
from trainbudget.core.spec.precision import get_precision
from trainbudget.core.units import format_bytes, format_count, format_flops

FLOPS_FORMULAS = ("exact", "6n", "palm")
# Default MFU: Llama 3 405B pre-training reached 38-43 % bf16 MFU on 8k-16k H100s
# (Dubey et al. 2024, arXiv 2407.21783, Table 4); 0.4 sits in that range.
DEFAULT_MFU = 0.4
# A bare count has no context length; per-token FLOPs (6N) do not depend on it, only the
# tokens-per-step bookkeeping does. 2048 is GPT-3's context (Brown et al. 2020, Table 2.1).
BARE_MODEL_SEQ_LEN = 2048


@dataclass(frozen=True, kw_only=True)
class EstimateRequest:
    model: ModelSpec | BareModel
    hardware: Hardware
    tokens: float | None = None
    """Training tokens; None skips time and cost."""
    n_gpus: int = 1
    mfu: float = DEFAULT_MFU
    precision: str = DEFAULT_PRECISION
    optimizer: str = DEFAULT_OPTIMIZER
    seq_len: int | None = None
    """None: the model's pre-training length (core.spec.defaults.default_seq_len)."""
    micro_batch: int = 1
    grad_accum: int = 1
    """Micro-batches per optimizer step on each GPU; a step covers
    micro_batch x grad_accum x n_gpus sequences (every GPU a data-parallel replica)."""
    recompute: str = "none"
    flash_attention: bool = DEFAULT_FLASH_ATTENTION
    causal: bool = False
    flops_formula: str = "exact"
    price_per_gpu_hour: float | None = None


@dataclass(frozen=True)
class Step:
    """One line of a derivation: `quantity = formula = value`."""

    quantity: str
    formula: str
    value: str


@dataclass(frozen=True, kw_only=True)
class Estimate:
    request: EstimateRequest
    seq_len: int
    n_params: int
    active_params: int
    params: ParamBreakdown | None
    flops: TrainingFlops
    flops_per_token: float
    """Training model FLOPs per token by the chosen formula."""
    train_flops: float | None
    tokens_per_step: int
    flops_per_step: float
    """Model FLOPs of one optimizer step (all GPUs)."""
    memory: MemoryBreakdown
    checkpoint_bytes: float
    time: TrainingTime | None
    assumptions: tuple[str, ...]
    steps: tuple[Step, ...] = field(default=())


def flops_formula_used(req: EstimateRequest) -> str:
    """The formula behind flops_per_token: a bare count has only 6N, whatever was asked."""
    return (
        "6n"
        if isinstance(req.model, BareModel) and req.flops_formula == "exact"
        else (req.flops_formula)
    )


def _flops_per_token(req: EstimateRequest, f: TrainingFlops) -> float:
    if req.flops_formula not in FLOPS_FORMULAS:
        raise SpecError(
            "flops_formula", req.flops_formula, "must be one of " + ", ".join(FLOPS_FORMULAS)
        )
    if req.flops_formula == "6n":
        return f.approx_6n_per_token
    if req.flops_formula == "palm":
        if f.palm_per_token is None:
            raise SpecError(
                "flops_formula",
                "palm",
                "needs an architecture (layers, heads); dense:N has only a count",
            )
        return f.palm_per_token
    return f.model_flops_per_token


def estimate(req: EstimateRequest) -> Estimate:
    for name, value in (
        ("gpus", req.n_gpus),
        ("micro_batch", req.micro_batch),
        ("grad_accum", req.grad_accum),
    ):
        if value <= 0:
            raise SpecError(name, value, "must be a positive integer")
    if req.tokens is not None and req.tokens < 0:
        raise SpecError("tokens", req.tokens, "must not be negative")
    model = req.model
    bare = isinstance(model, BareModel)
    if req.seq_len is not None:
        seq_len = req.seq_len
    else:
        seq_len = BARE_MODEL_SEQ_LEN if bare else default_seq_len(model).value
    if seq_len <= 0:
        raise SpecError("seq_len", seq_len, "must be a positive integer")
    params = None if bare else count_params(model)
    n_params = model.n_params if bare else params.total
    active = model.n_params if bare else params.active
    flops = training_flops(
        model,
        seq_len,
        causal=req.causal,
        recompute=req.recompute,
        flash_attention=req.flash_attention,
    )
    per_token = _flops_per_token(req, flops)
    memory, memory_note = one_gpu_memory(
        model,
        precision=req.precision,
        optimizer=req.optimizer,
        seq_len=seq_len,
        micro_batch=req.micro_batch,
        recompute=req.recompute,
        flash_attention=req.flash_attention,
    )
    prec = get_precision(req.precision)
    tokens_per_step = req.micro_batch * req.grad_accum * req.n_gpus * seq_len
    time = None
    train_flops = None
    if req.tokens is not None:
        train_flops = per_token * req.tokens
        if not math.isfinite(train_flops):
            raise SpecError("tokens", req.tokens, "gives training FLOPs beyond float range")
        time = training_time(
            train_flops=train_flops,
            n_gpus=req.n_gpus,
            mfu=req.mfu,
            peak_flops_per_second=req.hardware.peak_flops_per_second(prec.compute_dtype),
            price_per_gpu_hour=req.price_per_gpu_hour,
        )
    result = Estimate(
        request=req,
        seq_len=seq_len,
        n_params=n_params,
        active_params=active,
        params=params,
        flops=flops,
        flops_per_token=per_token,
        train_flops=train_flops,
        tokens_per_step=tokens_per_step,
        flops_per_step=per_token * tokens_per_step,
        memory=memory,
        checkpoint_bytes=checkpoint_bytes(model, precision=req.precision, optimizer=req.optimizer),
        time=time,
        assumptions=tuple(_assumptions(req, seq_len, memory_note)),
    )
    return Estimate(**{**result.__dict__, "steps": tuple(_steps(result))})


def _assumptions(req: EstimateRequest, seq_len: int, memory_note: str) -> list[str]:
    prec = get_precision(req.precision)
    out = [
        f"FLOPs are matmul FLOPs (multiply-add = 2), {'causal' if req.causal else 'non-causal'} "
        "attention, backward = 2 x forward; norms/softmax/activations not counted",
        f"training FLOPs per token by the '{flops_formula_used(req)}' formula; recomputation "
        f"('{req.recompute}') counted in hardware FLOPs only, not in model FLOPs or MFU",
        f"peak = {req.hardware.name} dense {prec.compute_dtype} "
        f"{req.hardware.peak_flops_per_second(prec.compute_dtype):.4g} FLOP/s (no sparsity); "
        f"MFU {req.mfu} of it",
        f"memory is for one GPU holding the whole model (no parallelism, no sharding); "
        f"{req.precision}: weights {prec.weight_bytes} B, grads {prec.grad_bytes} B, "
        f"master {prec.master_bytes} B per parameter",
        memory_note,
    ]
    if isinstance(req.model, BareModel):
        out.append(
            "dense:N has no architecture: FLOPs = 6N per token; activations, attention "
            "and per-part breakdowns are not computed (given as 0 / empty)"
        )
    else:
        out.append(
            f"activations for micro-batch {req.micro_batch} x {seq_len} tokens, "
            f"{prec.activation_bytes}-byte activations, "
            f"{'dropout masks kept' if req.model.dropout else 'no dropout'}, FlashAttention "
            f"{'on' if req.flash_attention else 'off'} (Korthikanti et al. 2022, "
            "arXiv 2205.05198, adapted)"
        )
    return out


def _steps(e: Estimate) -> list[Step]:
    req, f = e.request, e.flops
    s: list[Step] = []
    if e.params is not None:
        parts = " + ".join(f"{k} {v:,}" for k, v in e.params.as_dict().items() if v)
        s.append(Step("params N", parts, f"{e.n_params:,} ({format_count(e.n_params)})"))
        if e.active_params != e.n_params:
            s.append(
                Step("active params", "total - unvisited routed experts", f"{e.active_params:,}")
            )
    else:
        s.append(Step("params N", "given (dense:N)", f"{e.n_params:,}"))
    if f.forward_per_sequence is not None:
        fwd = f.forward_per_sequence
        parts = " + ".join(f"{k} {v:,}" for k, v in fwd.as_dict().items() if v)
        s.append(Step(f"forward FLOPs / sequence of {e.seq_len}", parts, f"{fwd.total:,}"))
        s.append(
            Step(
                "training FLOPs / token (exact)",
                f"3 x {fwd.total:,} / {e.seq_len}",
                f"{f.model_flops_per_token:,.0f}",
            )
        )
        s.append(Step("PaLM estimate / token", "6N' + 12 L H Q T", f"{f.palm_per_token:,}"))
    s.append(Step("6N / token", f"6 x {e.active_params:,}", f"{f.approx_6n_per_token:,}"))
    s.append(
        Step(
            "tokens / step",
            f"micro-batch {req.micro_batch} x accumulation {req.grad_accum} x "
            f"{req.n_gpus} GPUs x {e.seq_len}",
            f"{e.tokens_per_step:,}",
        )
    )
    s.append(
        Step(
            "FLOPs / step",
            f"{e.flops_per_token:,.0f} x {e.tokens_per_step:,}",
            f"{e.flops_per_step:.4g}",
        )
    )
    if f.recompute_flops_per_token:  # FlashAttention recomputes the scores even with "none"
        s.append(
            Step(
                f"recompute ({req.recompute}) / token",
                "extra forward work in backward"
                + (", FlashAttention's scores included" if req.flash_attention else ""),
                f"{f.recompute_flops_per_token:,.0f} (hardware FLOPs only)",
            )
        )
    s += _time_steps(e)
    s += _memory_steps(e)
    s.append(
        Step(
            "checkpoint",
            "highest-precision weights + optimizer state",
            format_bytes(e.checkpoint_bytes),
        )
    )
    return s


def _time_steps(e: Estimate) -> list[Step]:
    """Training FLOPs, the cluster's rate, time, GPU-hours and cost (when a token count was
    given)."""
    if e.train_flops is None or e.time is None:
        return []
    t, tokens = e.time, e.request.tokens
    s = [
        Step(
            "training FLOPs C",
            f"{e.flops_per_token:,.0f} x {tokens:.4g} tokens",
            f"{e.train_flops:.4g} ({format_flops(e.train_flops)})",
        ),
        Step(
            "cluster FLOP/s",
            f"{t.n_gpus} GPUs x {t.peak_flops_per_second:.4g} x MFU {t.mfu}",
            f"{t.achieved_flops_per_second:.4g}",
        ),
        Step(
            "time",
            f"{e.train_flops:.4g} / {t.achieved_flops_per_second:.4g}",
            f"{t.seconds:.5g} s = {t.days:.2f} days",
        ),
        Step("GPU-hours", f"{t.seconds:.5g} s x {t.n_gpus} / 3600", f"{t.gpu_hours:,.0f}"),
    ]
    if t.cost is not None:
        s.append(
            Step("cost", f"{t.gpu_hours:,.0f} GPU-h x {t.price_per_gpu_hour}", f"{t.cost:,.0f}")
        )
    return s


def _memory_steps(e: Estimate) -> list[Step]:
    """Weights, gradients, optimizer, activations and the total: the parts alive at the phase
    model's peak, or the sum of parts where that model does not apply."""
    req, m = e.request, e.memory
    prec = get_precision(req.precision)
    at = f"alive at {m.peak_phase}" if m.peak_phase else ""
    grads = f"{e.n_params:,} x {prec.grad_bytes} B"
    s = [
        Step("weights", f"{e.n_params:,} x {prec.weight_bytes} B", format_bytes(m.params_bytes)),
        Step(
            "gradients",
            at if m.peak_phase and m.grads_bytes != e.n_params * prec.grad_bytes else grads,
            format_bytes(m.grads_bytes),
        ),
        Step(
            f"optimizer ({req.optimizer})",
            "fp32 master + state",
            f"{format_bytes(m.master_bytes)} + {format_bytes(m.optimizer_state_bytes)}",
        ),
    ]
    if m.activations is not None:
        a = m.activations
        s.append(
            Step(
                "activations / layer",
                "Korthikanti eq. 1 adapted",
                format_bytes(a.per_layer.total_bytes),
            )
        )
        s.append(
            Step(
                f"activations ({req.recompute} recompute)",
                f"layers {format_bytes(a.layers_bytes)} + head {format_bytes(a.head_bytes)}"
                f" + logits/loss {format_bytes(a.logits_bytes)}",
                format_bytes(a.total_bytes),
            )
        )
    total = "weights + grads + optimizer + activations"
    if m.peak_phase:
        phases = ", ".join(f"{name} {format_bytes(b)}" for name, b in m.phases_bytes)
        s.append(Step("phases (peak model)", phases, f"peak at {m.peak_phase}"))
        s.append(
            Step(
                "activations at peak",
                f"{at} (logits and fp32 log-probabilities included)",
                format_bytes(m.activations_bytes),
            )
        )
        s.append(Step("temporaries at peak", at, format_bytes(m.temporaries_bytes)))
        total = f"{total} + temporaries, {at}"
    s.append(
        Step(
            "total per GPU",
            total,
            f"{format_bytes(m.total_bytes)} ({format_bytes(m.total_bytes, binary=True)}) "
            f"of {format_bytes(req.hardware.memory_bytes)}",
        )
    )
    return s
