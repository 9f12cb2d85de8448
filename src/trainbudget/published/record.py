"""The typed record of one published training run, and the rules every record obeys.

A record holds only what a source says (and what had to be assumed, named in `assumed`):
the model as a `ModelSpec` (a preset where one exists), the hardware, the parallel layout and
batch, and the measured figure in the source's own units with its FLOP convention. All rules
are checked in `PublishedRun.__post_init__`; a broken one raises a one-line `RunDataError`
naming the run id, the field, the value and the rule.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.fits import MEMORY_MEASURES
from trainbudget.core.parallel.plan import OFFLOAD_TARGETS
from trainbudget.core.single.flops import RECOMPUTE_KINDS
from trainbudget.core.spec.engines import LOSS_KERNELS
from trainbudget.core.spec.hardware import ATTENTION_KERNELS, HARDWARE
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import PRECISIONS
from trainbudget.core.spec.presets import get_preset

# How a source counts the FLOPs behind its TFLOP/s or MFU figure (h = d_model, l = layers,
# s = sequence, B = global batch, V = vocabulary).
FLOP_CONVENTIONS = {
    "megatron-96Bslh2": "96*B*s*l*h^2 * (1 + s/(6h) + V/(16*l*h)) per iteration (Narayanan et "
    "al. 2021, eq. 3): matmuls only, non-causal attention, and one extra forward for full "
    "recomputation (4 passes, not 3)",
    "megatron-72Bslh2": "72*B*s*l*h^2 * (1 + s/(6h) + V/(12*l*h)) per iteration: the same "
    "model without recomputation (3 passes), Korthikanti et al. 2022's MFU",
    "palm": "6N + 12*l*h*s per token (Chowdhery et al. 2022, App. B), N the matmul parameters",
    "nemo-dgxc": "per sequence s * (attention + mlp + embedding), attention = 12*l*h^2*(1 + "
    "kv_groups/heads + s/h), mlp = 18*l*ffn*h (SwiGLU) or 48*l*h^2 (4h non-gated), embedding "
    "= 6*V*h (the 'Notes' of each dgxc-benchmarking README)",
    "flash-attention-2": "per sequence 6*s*N + 12*l*h*s^2, N every parameter (embeddings "
    "included), non-causal attention, recomputation not counted (Dao 2023, FlashAttention-2, "
    "arXiv:2307.08691, §4.2, the formula under Table 1)",
    "arctic-causal": "per sequence 6*s*(l*(3*h*ffn + h*(2*q + 2*kv)) + V*h) + 6*s^2*l*h: "
    "every linear layer and one V x h matrix (embedding and head counted once), attention "
    "causal (half of 12*s^2*l*h), recomputation not counted (ArcticTraining's FlopsCounter as "
    "S. Bekman's ml-engineering insights/when-to-upgrade-gpus/benchmark.py estimate_tflos "
    "ports it)",
    "nemo-causal": "nemo-dgxc with its attention term halved for the causal mask: per token "
    "12*l*h^2*(1 + kv_groups/heads + s/(2h)) + 18*l*ffn*h (SwiGLU; 12*l*ffn*h non-gated) + "
    "6*V*h, V NeMo's vocabulary for the family (NeMo nemo/utils/flops_formulas.py from commit "
    "6251117f4c, 2025-08-09, 'Discount FLOPs in dot-product att'; Megatron-Bridge and NeMo "
    "AutoModel performance summaries)",
}

# Who ran the training: the software stack the run's source names (the error is broken down by
# it). Megatron-DeepSpeed is its own row: Megatron's model code on DeepSpeed's engine.
FRAMEWORKS = {
    "megatron": "NVIDIA Megatron-LM or Megatron-Core used directly",
    "megatron-legacy": "Megatron-LM from February 2021 until its pipeline code moved into "
    "Megatron-Core (March 2023): pipeline messages scattered across the TP group",
    "megatron-deepspeed": "Megatron's model code with DeepSpeed's pipeline and ZeRO engine",
    "megatron-deepspeed-2021": "Megatron's model code with DeepSpeed 0.3.13-0.5.0 (March-August "
    "2021), whose ZeRO-3 gathered tensor by tensor",
    "deepspeed": "DeepSpeed without Megatron's model code",
    "deepspeed-0.19.2": "DeepSpeed 0.19.2-0.19.4 without Megatron's model code, whose ZeRO-3 "
    "optimizer offload copied the gradients to the host blocking the backward",
    "pytorch-fsdp": "PyTorch FullyShardedDataParallel (or FairScale's FSDP it grew from)",
    "pytorch-fsdp2": "PyTorch's per-parameter sharding fully_shard (FSDP2) in a torch-native "
    "trainer (NeMo AutoModel and the like)",
    "kempnerforge": "the Kempner Institute's KempnerForge: FSDP2 fully_shard and DTensor TP, "
    "accumulation without gradient sync, the loss on the gathered bf16 logits",
    "pytorch-ddp": "PyTorch DistributedDataParallel around a torch.compile'd model, no sharding",
    "nanotron": "Hugging Face nanotron: torch-native 3D parallelism (TP with reduce-scatter, "
    "1F1B pipeline), ZeRO-0/1, fp32 gradient accumulation",
    "nemo": "NVIDIA NeMo (on Megatron-Core)",
    "nemo-1": "NVIDIA NeMo 1.x (containers up to 24.09) with Apex's DistributedFusedAdam, as "
    "NeMo-Framework-Launcher's yaml runs it",
    "nemo-1-bf16-grads": "NeMo 1.x with DistributedFusedAdam and grad_sync_dtype bf16 (the "
    "launcher's H100 example scripts)",
    "nemo-1-bf16-adam": "NeMo 1.x with DistributedFusedAdam, optimizer dtype and "
    "grad_sync_dtype bf16 (the launcher's Nemotron-4 340B yaml)",
    "megatron-bridge-perf": "NVIDIA Megatron-Bridge's performance recipes (NeMo 25.11 and "
    "later, on Megatron-Core): bf16 gradient buffer and reduction",
    "internlm-2023": "InternLM's own trainer of mid-2023 (later InternEvo): HybridZeroOptimizer, "
    "flash-attention and its fused kernels",
    "pytorch-native": "a PyTorch trainer of its own, neither Megatron, DeepSpeed nor FSDP: "
    "InternLM/InternEvo (flash-attention, apex kernels, its hybrid ZeRO-1), nanochat "
    "(torch.compile, optimizers sharding their state ZeRO-2 style)",
    "other": "any other stack (an in-house trainer, SageMaker model parallelism, ...)",
}

_ID = re.compile(r"[a-z0-9][a-z0-9.-]*")
_Fail = Callable[[str, object, str], NoReturn]  # raises for (field, value, rule)


class RunDataError(SpecError):
    """A published run breaks a rule: `run_id`, then the field, value and rule of SpecError."""

    def __init__(self, run_id: str, field: str, value: object, rule: str) -> None:
        super().__init__(field, value, rule)
        self.run_id = run_id
        self.args = (f"published run {run_id!r}: {self.args[0]}",)


@dataclass(frozen=True, kw_only=True)
class Layout:
    """How the run spread over its GPUs, and its batch (Megatron's names)."""

    tp: int
    """Tensor-parallel degree."""
    pp: int
    """Pipeline stages."""
    dp: int
    """Data-parallel replicas."""
    cp: int = 1
    """Context-parallel degree (each sequence split over cp GPUs)."""
    vpp: int = 1
    """Model chunks per pipeline rank (interleaved schedule); 1 = not interleaved."""
    pp_layers: tuple[int, ...] = ()
    """Transformer layers of each pipeline stage, first to last, where the source states an
    uneven split (first and last stages a layer short); () = n_layers / pp on every stage."""
    embedding_in_pp_split: bool = False
    """Megatron-Core's --account-for-embedding-in-pipeline-split: the embedding counts as one
    layer of the first (virtual) stage when the layers are split (core Plan's field)."""
    loss_in_pp_split: bool = False
    """--account-for-loss-in-pipeline-split: the output layer and loss count as one layer of
    the last (virtual) stage."""
    sp: bool
    """Megatron sequence parallelism (norms and dropouts split over the TP group)."""
    recompute: str
    """Activation recomputation: 'none', 'selective' or 'full'."""
    zero: int
    """Sharding stage 0-3: Megatron distributed optimizer = 1, FSDP full shard = 3."""
    zero_shard: int = 0
    """HSDP: shard over groups of this many data-parallel ranks and replicate across the groups
    (MiCS); 0 = shard over all of dp."""
    micro_batch: int
    """Sequences per micro-batch on one data-parallel rank."""
    global_batch: int
    """Sequences per optimizer step, all replicas together."""
    flash_attention: bool
    """Fused attention that never stores the score matrix (FlashAttention or an equivalent);
    False for the 2021-2022 Megatron/DeepSpeed runs, which used unfused softmax kernels."""
    offload_optimizer: str = "none"
    """Where the fp32 master weights and Adam state live: 'none' (on the GPU), 'cpu' (DeepSpeed
    ZeRO-Offload's offload_optimizer: the optimizer step runs on the host) or 'nvme'."""

    @property
    def n_gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def grad_accum(self) -> int:
        """Micro-batches per step on one data-parallel rank."""
        return self.global_batch // (self.micro_batch * self.dp)


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """What the source reports, in its own units; None where it reports nothing."""

    iteration_seconds: float | None = None
    """Wall-clock seconds per optimizer step."""
    tflops_per_second_per_gpu: float | None = None
    """Achieved TFLOP/s (1e12 FLOP/s) per GPU, counted with `flops_convention`."""
    tokens_per_second_per_gpu: float | None = None
    """Training tokens per second per GPU."""
    samples_per_second_per_gpu: float | None = None
    """Training sequences per second per GPU."""
    mfu: float | None = None
    """Model FLOPs utilisation, a fraction of the dense peak (0.43 = 43 %)."""
    hfu: float | None = None
    """Hardware FLOPs utilisation (recomputation included), a fraction of the dense peak."""
    flops_convention: str | None = None
    """Key of FLOP_CONVENTIONS: how the TFLOP/s or MFU figure counts FLOPs; None = unstated."""
    flops_note: str = ""
    """What the source adds about its FLOP count (its per-sequence figure, HFU's extra)."""
    memory_bytes_per_gpu: float | None = None
    """Peak memory on one GPU as the source reports it (the most loaded GPU where it says)."""
    memory_measure: str | None = None
    """What `memory_bytes_per_gpu` measures, a key of core.parallel.fits.MEMORY_MEASURES:
    'allocated' (torch.cuda.max_memory_allocated), 'reserved' (max_memory_reserved) or 'device'
    (nvidia-smi / NVML: reserved + CUDA context + NCCL buffers), as the source's own words or
    code say it ('measured.memory_measure' in `assumed` where they do not). Stated with every
    memory figure, None without one."""


@dataclass(frozen=True, kw_only=True)
class PublishedRun:
    """One published large-scale training run, as its source reports it."""

    id: str
    """Short unique slug (lower case, digits, '-' and '.')."""
    source: str
    """Citation (authors, title, arXiv or URL) and the table, figure or section read."""
    source_key: str
    """Slug of the publication the figure comes from (every run of one paper, report or
    benchmark page shares it): the unit that leave-one-source-out validation holds out."""
    framework: str
    """Key of FRAMEWORKS: the training stack the source names."""
    framework_source: str
    """Where the source names the framework (a quote or section), or why it is assumed."""
    model: ModelSpec
    """The architecture trained; position and norm as the source's model uses them."""
    seq_len: int
    """Tokens per training sequence."""
    gpu: str
    """Hardware catalog key, or 'other:NAME' for a part the catalog lacks (not scored)."""
    n_gpus: int
    """GPUs in the run."""
    gpus_per_node: int
    """GPUs per server (NVLink domain)."""
    layout: Layout
    measured: Measurement
    nic_bytes_per_second: float | None = None
    """Each GPU's share of the inter-node network where the source states its cluster's and it
    is not the catalog row's platform (the InternLM page's 4 x 100 Gb/s RoCE a node of 8:
    6.25e9); `validation.compare` times the run on it, as `--nic-bandwidth` does. None: the
    catalog row's."""
    precision: str = "bf16-mixed"
    """Key of core.spec.precision.PRECISIONS the run trained in: 'bf16-mixed' (the default,
    every 2021-2024 run here), 'fp8' where the source says its linear layers ran in FP8
    (Transformer Engine, torchao float8)."""
    tp_comm_overlap: bool = False
    """The source (or the launcher config it names) pipelines TP communication with the GEMMs
    (Megatron's --tp-comm-overlap, NeMo's ub_tp_comm_overlap): `Framework.tp_comm_overlap`."""
    compiled: bool = False
    """The run's script wraps the model, loss included, in torch.compile: `Framework.compiled`."""
    whole_model_on_gpu_at_init: bool = False
    """The run's code builds the whole model off the GPU and hands it to an engine that moves it
    onto every GPU before sharding it (DeepSpeed's `deepspeed.initialize` without
    `deepspeed.zero.Init`: the engine's `_configure_distributed_model` calls `module.to(device)`
    on the unsharded module), so every GPU holds all the weights once, at start-up. A peak
    figure that is a high-water mark since start-up (`max_memory_reserved` never reset) cannot
    be below them: `validation.compare` takes the larger of that and the step's peak."""
    attention_kernel: str = ""
    """The fused attention kernel the run used (hardware.ATTENTION_KERNELS) where its code pins
    one the framework row does not: the first FlashAttention of flash-attn before 2.0; ''
    for the framework row's."""
    loss_kernel: str | None = None
    """The loss kernel the run used (core.spec.engines.LOSS_KERNELS) where it is not the
    framework row's: 'fused-linear-cross-entropy' where the source or its code turns on a
    fused linear cross-entropy (Liger-Kernel); None for the framework row's."""
    assumed: frozenset[str] = frozenset()
    """Fields the source does not state, filled in as the notes explain ('layout.vpp',
    'model.vocab_size', 'seq_len', ...); every other field is reported or derived exactly."""
    notes: str
    """Where each number was read, the consistency checks made and every assumption."""

    def __post_init__(self) -> None:
        _validate(self)


def preset(name: str, **source_overrides: object) -> ModelSpec:
    """A catalog preset, with the fields where the run's source differs from it."""
    return get_preset(name).replace(**source_overrides)


def architecture(
    *,
    name: str,
    source: str,
    vocab_size: int,
    d_model: int,
    n_layers: int,
    n_heads: int,
    n_kv_heads: int,
    d_ff: int,
    max_seq_len: int,
    mlp: str,
    norm: str,
    position: str,
    tied_embeddings: bool,
    bias: bool,
    dropout: bool,
) -> ModelSpec:
    """A model without a preset, every field stated (none left to ModelSpec's defaults)."""
    return ModelSpec(
        name=name,
        vocab_size=vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=d_ff,
        max_seq_len=max_seq_len,
        mlp=mlp,
        norm=norm,
        position=position,
        tied_embeddings=tied_embeddings,
        bias=bias,
        dropout=dropout,
        sources=(source,),
    )


def assumable_fields() -> frozenset[str]:
    """The names `assumed` may hold: a run field, or 'model.', 'layout.', 'measured.' + field."""
    fixed = {"id", "source", "source_key", "framework_source", "assumed", "notes"}
    top = {f.name for f in dataclasses.fields(PublishedRun)} - fixed
    nested = {
        f"{prefix}.{f.name}"
        for prefix, cls in (("model", ModelSpec), ("layout", Layout), ("measured", Measurement))
        for f in dataclasses.fields(cls)
    }
    return frozenset(top | nested)


def _validate(run: PublishedRun) -> None:
    def fail(name: str, value: object, rule: str) -> NoReturn:
        raise RunDataError(str(run.id), name, value, rule)

    if not isinstance(run.id, str) or not _ID.fullmatch(run.id):
        fail("id", run.id, "must be a slug of lower-case letters, digits, '-' and '.'")
    for name in ("source", "framework_source", "notes"):
        if not isinstance(getattr(run, name), str) or not getattr(run, name).strip():
            fail(name, getattr(run, name), "must be a non-empty string")
    if not isinstance(run.source_key, str) or not _ID.fullmatch(run.source_key):
        fail("source_key", run.source_key, "must be a slug of lower-case letters, digits, '-'")
    if run.framework not in FRAMEWORKS:
        fail("framework", run.framework, "must be one of " + ", ".join(FRAMEWORKS))
    if run.precision not in PRECISIONS:
        fail("precision", run.precision, "must be one of " + ", ".join(PRECISIONS))
    if run.attention_kernel and run.attention_kernel not in ATTENTION_KERNELS:
        rule = "must be '' or one of " + ", ".join(ATTENTION_KERNELS)
        fail("attention_kernel", run.attention_kernel, rule)
    if run.nic_bytes_per_second is not None and not run.nic_bytes_per_second > 0:
        fail("nic_bytes_per_second", run.nic_bytes_per_second, "must be above zero or None")
    if run.loss_kernel is not None and run.loss_kernel not in LOSS_KERNELS:
        fail("loss_kernel", run.loss_kernel, "must be None or one of " + ", ".join(LOSS_KERNELS))
    for name, cls in (("model", ModelSpec), ("layout", Layout), ("measured", Measurement)):
        if not isinstance(getattr(run, name), cls):
            fail(name, type(getattr(run, name)).__name__, f"must be a {cls.__name__}")
    for name in ("seq_len", "n_gpus", "gpus_per_node"):
        _positive_int(fail, name, getattr(run, name))
    if run.model.position == "learned" and run.seq_len > run.model.max_seq_len:
        fail(
            "seq_len",
            run.seq_len,
            f"exceeds the learned table (max_seq_len {run.model.max_seq_len})",
        )
    if not isinstance(run.gpu, str) or (
        run.gpu not in HARDWARE and not run.gpu.startswith("other:")
    ):
        fail("gpu", run.gpu, "must be a hardware catalog key or 'other:NAME'")
    if run.n_gpus % run.gpus_per_node:
        fail("n_gpus", run.n_gpus, f"must be a multiple of gpus_per_node ({run.gpus_per_node})")
    _validate_layout(fail, run.layout, run.n_gpus)
    if run.layout.pp_layers and sum(run.layout.pp_layers) != run.model.n_layers:
        rule = f"must sum to the model's n_layers ({run.model.n_layers})"
        fail("layout.pp_layers", run.layout.pp_layers, rule)
    _validate_measurement(fail, run.measured)
    if not isinstance(run.assumed, frozenset):
        fail("assumed", run.assumed, "must be a frozenset of field names")
    for name in sorted(run.assumed - assumable_fields()):
        fail("assumed", name, "is not a field of the record (e.g. 'layout.vpp', 'seq_len')")


def _is_count(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value > 0


def _positive_int(fail: _Fail, name: str, value: object) -> None:
    if not _is_count(value):
        fail(name, value, "must be a positive integer")


def _validate_layout(fail: _Fail, lay: Layout, n_gpus: int) -> None:
    for name in ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "global_batch"):
        _positive_int(fail, f"layout.{name}", getattr(lay, name))
    for name in ("sp", "flash_attention"):
        if not isinstance(getattr(lay, name), bool):
            fail(f"layout.{name}", getattr(lay, name), "must be true or false")
    if lay.recompute not in RECOMPUTE_KINDS:
        fail("layout.recompute", lay.recompute, "must be one of " + ", ".join(RECOMPUTE_KINDS))
    if lay.zero not in (0, 1, 2, 3) or isinstance(lay.zero, bool):
        fail("layout.zero", lay.zero, "must be 0, 1, 2 or 3")
    if lay.offload_optimizer not in OFFLOAD_TARGETS:
        fail(
            "layout.offload_optimizer",
            lay.offload_optimizer,
            "must be one of " + ", ".join(OFFLOAD_TARGETS),
        )
    if n_gpus != lay.n_gpus:
        factors = f"{lay.tp}*{lay.pp}*{lay.dp}*{lay.cp} = {lay.n_gpus}"
        fail("n_gpus", n_gpus, f"must equal tp*pp*dp*cp ({factors})")
    if isinstance(lay.zero_shard, bool) or not isinstance(lay.zero_shard, int):
        fail("layout.zero_shard", lay.zero_shard, "must be an integer (0 = all of dp)")
    if lay.zero_shard and (lay.zero_shard < 0 or lay.dp % lay.zero_shard or lay.zero == 0):
        rule = f"must be 0 or divide dp ({lay.dp}), with zero > 0"
        fail("layout.zero_shard", lay.zero_shard, rule)
    if lay.pp_layers and (
        len(lay.pp_layers) != lay.pp or not all(_is_count(n) for n in lay.pp_layers)
    ):
        fail("layout.pp_layers", lay.pp_layers, f"must be {lay.pp} positive integers (one a stage)")
    if lay.global_batch % (lay.micro_batch * lay.dp):
        fail(
            "layout.global_batch",
            lay.global_batch,
            f"must be a multiple of micro_batch*dp ({lay.micro_batch}*{lay.dp})",
        )


def _validate_measurement(fail: _Fail, m: Measurement) -> None:
    figures = (
        "iteration_seconds",
        "tflops_per_second_per_gpu",
        "tokens_per_second_per_gpu",
        "samples_per_second_per_gpu",
    )
    for name in (*figures, "mfu", "hfu", "memory_bytes_per_gpu"):
        value = getattr(m, name)
        if value is not None and (isinstance(value, bool) or not value > 0):
            fail(f"measured.{name}", value, "must be a positive number or None")
    for name in ("mfu", "hfu"):
        if getattr(m, name) is not None and getattr(m, name) > 1:
            fail(f"measured.{name}", getattr(m, name), "is a fraction: must be at most 1")
    if all(getattr(m, name) is None for name in (*figures, "mfu")):
        fail("measured", None, "needs a figure: " + ", ".join((*figures, "mfu")))
    _validate_memory_measure(fail, m)
    if m.flops_convention is not None and m.flops_convention not in FLOP_CONVENTIONS:
        fail(
            "measured.flops_convention",
            m.flops_convention,
            "must be one of " + ", ".join(FLOP_CONVENTIONS),
        )
    if m.tflops_per_second_per_gpu is not None and m.flops_convention is None:
        fail("measured.flops_convention", None, "must be stated with tflops_per_second_per_gpu")


def _validate_memory_measure(fail: _Fail, m: Measurement) -> None:
    """A memory figure names what it measures (the model's allocated peak is converted to it
    before the two are compared); a measure without a figure is a slip."""
    if m.memory_bytes_per_gpu is None:
        if m.memory_measure is not None:
            fail("measured.memory_measure", m.memory_measure, "needs memory_bytes_per_gpu")
        return
    if m.memory_measure not in MEMORY_MEASURES:
        rule = "must be stated with memory_bytes_per_gpu: one of " + ", ".join(MEMORY_MEASURES)
        fail("measured.memory_measure", m.memory_measure, rule)


def unique_ids(runs: tuple[PublishedRun, ...]) -> tuple[PublishedRun, ...]:
    """`runs`, after checking that no two share an id."""
    seen: set[str] = set()
    for run in runs:
        if run.id in seen:
            raise RunDataError(run.id, "id", run.id, "must be unique; it appears twice")
        seen.add(run.id)
    return runs
