"""Precision policies and optimizers: bytes per parameter of weights, gradients and state.
`OPTIMIZERS` is the one table of optimizers (state, update scratch, whether the trainer runs it).

Policies (the bytes each keeps per parameter):
- fp32: fp32 weights and gradients, fp32 optimizer state.
- bf16-mixed / fp16-mixed: 16-bit weights and gradients plus an fp32 master copy and fp32
  optimizer state, the accounting of ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054, Sec. 3.1:
  2 + 2 + K bytes, K = 12 for Adam) and of seed 004 (LLaMA-2 70B: 140 + 140 + 840 GB).
- bf16: everything in bf16, no master copy (pure 16-bit training).
- amp-bf16 / amp-fp16: PyTorch autocast: fp32 weights, gradients and state, 16-bit compute.
- fp8: FP8 matmuls over bf16-mixed bytes, as Transformer Engine and torchao float8 train (see the
  comment at the row: what is and is not modelled).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from trainbudget.core.errors import SpecError, unknown_key


@dataclass(frozen=True, kw_only=True)
class Precision:
    name: str
    weight_bytes: int
    """Bytes per parameter of the weights the forward pass reads."""
    grad_bytes: int
    master_bytes: int
    """fp32 master copy kept by the optimizer (0 when the weights are already the master)."""
    state_bytes: int
    """Bytes per element of full-size optimizer state (momentum, variance)."""
    activation_bytes: int
    """Bytes per stored activation element."""
    compute_dtype: str
    """Which peak FLOP/s of the hardware applies: 'fp32', 'bf16', 'fp16' or 'fp8' (a key of
    `Hardware.dense_flops_per_second`; a chip without it cannot run the policy). Under an FP8
    recipe, the rate of the linear layers' GEMMs (and the peak MFU is quoted against)."""
    outside_recipe_dtype: str = ""
    """The dtype of the matmuls a low-precision recipe leaves out -- the attention core and
    the output head; '' = compute_dtype (every matmul in it)."""

    @property
    def other_matmul_dtype(self) -> str:
        """The dtype of the attention core's and the head's matmuls."""
        return self.outside_recipe_dtype or self.compute_dtype


FP8_RECIPE_SCOPE = (
    "the linear layers' GEMMs (QKV, attention output, MLP) run in FP8; the attention core, the "
    "output head and the loss stay bf16: Transformer Engine replaces only Linear layers "
    "(te.Linear / LayerNormLinear, Megatron-Core's output_layer is its own ColumnParallelLinear "
    "in the model dtype, and FlashAttention/cuDNN attention runs bf16 unless fp8_dpa is set); "
    "torchao's convert_to_float8_training swaps nn.Linear modules only, and recipes filter the "
    "output projection out (module_filter_fn)"
)
"""Which matmuls an FP8 recipe runs in FP8 (what `Precision.outside_recipe_dtype` says)."""
PRECISIONS = MappingProxyType(
    {
        p.name: p
        for p in (
            Precision(
                name="fp32",
                weight_bytes=4,
                grad_bytes=4,
                master_bytes=0,
                state_bytes=4,
                activation_bytes=4,
                compute_dtype="fp32",
            ),
            Precision(
                name="bf16-mixed",
                weight_bytes=2,
                grad_bytes=2,
                master_bytes=4,
                state_bytes=4,
                activation_bytes=2,
                compute_dtype="bf16",
            ),
            Precision(
                name="fp16-mixed",
                weight_bytes=2,
                grad_bytes=2,
                master_bytes=4,
                state_bytes=4,
                activation_bytes=2,
                compute_dtype="fp16",
            ),
            Precision(
                name="bf16",
                weight_bytes=2,
                grad_bytes=2,
                master_bytes=0,
                state_bytes=2,
                activation_bytes=2,
                compute_dtype="bf16",
            ),
            # PyTorch autocast (torch.autocast): fp32 weights, gradients and state; matmuls
            # and most activations in 16 bits; fp16 adds a gradient scaler. weight_bytes >
            # activation_bytes is what tells the activation model it is autocast: the residual
            # stream stays fp32 and each matmul saves a 16-bit copy of its weight
            # (core/single/activations.py)
            Precision(
                name="amp-bf16",
                weight_bytes=4,
                grad_bytes=4,
                master_bytes=0,
                state_bytes=4,
                activation_bytes=2,
                compute_dtype="bf16",
            ),
            Precision(
                name="amp-fp16",
                weight_bytes=4,
                grad_bytes=4,
                master_bytes=0,
                state_bytes=4,
                activation_bytes=2,
                compute_dtype="fp16",
            ),
            # FP8 training as Transformer Engine (Micikevicius et al. 2022, "FP8 Formats for
            # Deep Learning", arXiv 2209.05433) and torchao float8 (the torchtitan recipe) run
            # it: the weights the GEMMs read stay bf16 (Megatron + TE: bf16 parameters;
            # torchtitan: FSDP2's bf16 copy of fp32 parameters) and each Linear casts its
            # input and weight to FP8 per GEMM (E4M3 forward, E5M2 or E4M3 for gradients;
            # delayed or current scaling); the optimizer keeps fp32 master weights and fp32
            # Adam state. So the bytes per parameter are bf16-mixed's (2 + 2 + 4 + K, 16 for
            # AdamW); only the matmul rate changes. Activations are modelled as torchao's
            # default: torchao/float8/float8_linear.py matmul_with_hp_or_float8_args saves the
            # bf16 input and weight for backward, so 2 bytes. Transformer Engine instead saves
            # the FP8 GEMM input (transformer_engine/pytorch/module/linear.py: saved_inputmat
            # or its FP8 transpose, 1 byte) and bf16 for everything else; one activation_bytes
            # cannot say both, so TE runs are overestimated here. Not counted: the FP8 copy of
            # the weights (transient, one layer at a time; TE can cache it across
            # micro-batches) and scaling factors (one fp32 per tensor with tensorwise
            # scaling).
            Precision(
                name="fp8",
                weight_bytes=2,
                grad_bytes=2,
                master_bytes=4,
                state_bytes=4,
                activation_bytes=2,
                compute_dtype="fp8",
                # only the linear layers' GEMMs run in FP8 (see FP8_RECIPE_SCOPE); their
                # casts as the framework's recipe moves them (Framework.fp8_recipe)
                outside_recipe_dtype="bf16",
            ),
        )
    }
)


def get_precision(name: str) -> Precision:
    if name not in PRECISIONS:
        raise unknown_key("precision", name, list(PRECISIONS))
    return PRECISIONS[name]


# 8-bit Adam keeps both moments in 8 bits with one fp32 absmax per block of 2048 values
# (Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization", arXiv 2110.02861, Sec. 2).
ADAM8BIT_BLOCK = 2048

# the update the reference trainer runs, whose temporaries `scratch_tensors` counts
SINGLE_TENSOR = "torch's single-tensor (for-loop) update, one parameter at a time"


@dataclass(frozen=True, kw_only=True)
class Optimizer:
    """One optimizer: the state it keeps between steps, the scratch its update allocates, and
    whether the trainer can run it. A row of `OPTIMIZERS`, the one list of optimizer names:
    the CLI's choices, the training config's validation and the trainer's torch factories
    (`model/optimizers.py: FACTORIES`, one per trainable row) all read it."""

    name: str
    state_tensors: tuple[str, ...]
    """Full-size state tensors per parameter, by the key the torch implementation stores each
    under (Adam: exp_avg, exp_avg_sq); empty for a factored optimizer."""
    state_bytes_override: float | None = None
    """Bytes per state element when the optimizer fixes it (8-bit Adam), else the policy's."""
    factored: bool = False
    """Adafactor: a matrix keeps row and column statistics, not a full second moment."""
    scratch_tensors: tuple[str, ...] = ()
    """Temporaries the size of the parameter being updated, alive at once during its
    single-tensor update (each in the state's dtype): what `peak_memory.training_peak` adds
    at the optimizer step. Empty for an estimate-only row (no update to count)."""
    scratch_source: str = ""
    """Where `scratch_tensors` comes from: the line of the update that allocates them."""
    trainable: bool = True
    """The trainer has a torch factory for it (`model/optimizers.py: FACTORIES`)."""
    fused_kernel: bool = False
    """torch has a fused kernel for it, which the trainer runs (model/optimizers.py): an update
    with no scratch (`peak_memory.training_peak`'s fused_update)."""
    estimate_only_reason: str = ""
    """Why the trainer cannot run it (required when `trainable` is False)."""
    source: str
    """The paper (or documentation) the state accounting follows."""

    def __post_init__(self) -> None:
        # table data, checked once at import: a wrong row is a bug, not user input
        if self.trainable == bool(self.estimate_only_reason):
            raise ValueError(f"optimizer {self.name}: estimate_only_reason iff not trainable")
        if self.trainable and not self.scratch_source:
            raise ValueError(f"optimizer {self.name}: a trainable row cites its scratch_source")

    @property
    def n_states(self) -> int:
        """Full-size state tensors per parameter (momentum, variance, ...)."""
        return len(self.state_tensors)

    @property
    def n_scratch(self) -> int:
        """Parameter-sized temporaries of one single-tensor update."""
        return len(self.scratch_tensors)

    def state_bytes_per_param(self, precision: Precision) -> float:
        """Bytes of optimizer state per parameter, master copy excluded (dense tensors)."""
        per_element = self.state_bytes_override or precision.state_bytes
        return self.n_states * per_element


OPTIMIZERS = MappingProxyType(
    {
        o.name: o
        for o in (
            Optimizer(
                name="sgd",
                state_tensors=(),
                scratch_tensors=(),
                scratch_source=f"{SINGLE_TENSOR}: p.add_(grad, alpha=-lr), in place",
                source="plain SGD keeps no state",
            ),
            Optimizer(
                name="momentum",
                state_tensors=("momentum_buffer",),
                scratch_tensors=(),
                scratch_source=f"{SINGLE_TENSOR}: buf.mul_(momentum).add_(grad) and "
                "p.add_(buf, alpha=-lr), in place (the first step's copy of the gradient "
                "becomes the buffer)",
                source="SGD with momentum (Polyak 1964): one velocity buffer",
            ),
            Optimizer(
                name="adagrad",
                state_tensors=("sum",),
                scratch_tensors=("sqrt(sum) + eps",),
                scratch_source=f"{SINGLE_TENSOR}: std = sum.sqrt().add_(eps)",
                source="Duchi et al. 2011: sum of squared gradients (seed 001, AdaGrad)",
            ),
            Optimizer(
                name="rmsprop",
                state_tensors=("square_avg",),
                scratch_tensors=("sqrt(square_avg) + eps",),
                scratch_source=f"{SINGLE_TENSOR}: avg = square_avg.sqrt().add_(eps) "
                "(torch.optim.RMSprop, centered=False)",
                source="Hinton 2012: running mean of squares",
            ),
            Optimizer(
                name="adam",
                state_tensors=("exp_avg", "exp_avg_sq"),
                fused_kernel=True,
                scratch_tensors=("sqrt(v)", "sqrt(v) / sqrt(bias_correction2)"),
                scratch_source=f"{SINGLE_TENSOR}: denom = (exp_avg_sq.sqrt() / "
                "bias_correction2_sqrt).add_(eps) (torch.optim.Adam)",
                source="Kingma & Ba 2015, arXiv 1412.6980: m and v",
            ),
            Optimizer(
                name="adamw",
                state_tensors=("exp_avg", "exp_avg_sq"),
                fused_kernel=True,
                scratch_tensors=("sqrt(v)", "sqrt(v) / sqrt(bias_correction2)"),
                scratch_source=f"{SINGLE_TENSOR}: denom = (exp_avg_sq.sqrt() / "
                "bias_correction2_sqrt).add_(eps) (torch.optim.AdamW; the decay is in place)",
                source="Loshchilov & Hutter 2019, arXiv 1711.05101: m and v",
            ),
            Optimizer(
                name="lion",
                state_tensors=("exp_avg",),
                scratch_tensors=("sign(beta1 * m + (1 - beta1) * g)",),
                scratch_source="model/optimizers.py Lion.step, one parameter at a time: "
                "m.mul(beta1).add_(g, alpha=1 - beta1).sign_(); the rest in place",
                source="Chen et al. 2023, arXiv 2302.06675, Algorithm 2: one momentum m",
            ),
            Optimizer(
                name="adafactor",
                state_tensors=(),
                factored=True,
                trainable=False,
                estimate_only_reason="no torch factory yet: torch.optim.Adafactor (torch >= "
                "2.5) exists, but its update's temporaries are not counted here",
                source="Shazeer & Stern 2018, arXiv 1804.04235: factored second moment, beta1=0",
            ),
            Optimizer(
                name="adamw-8bit",
                state_tensors=("exp_avg", "exp_avg_sq"),
                state_bytes_override=1 + 4 / ADAM8BIT_BLOCK,
                trainable=False,
                estimate_only_reason="needs bitsandbytes (CUDA kernels), not a dependency",
                source="Dettmers et al. 2022, arXiv 2110.02861: 8-bit blockwise m and v",
            ),
        )
    }
)
TRAINABLE_OPTIMIZERS = tuple(name for name, o in OPTIMIZERS.items() if o.trainable)
"""The names the trainer (and `trainbudget profile`) can run, in the table's order."""


def get_optimizer(name: str) -> Optimizer:
    if name not in OPTIMIZERS:
        raise unknown_key("optimizer", name, list(OPTIMIZERS))
    return OPTIMIZERS[name]


def get_trainable_optimizer(name: str) -> Optimizer:
    """`get_optimizer`, refusing an estimate-only row with its reason."""
    opt = get_optimizer(name)
    if not opt.trainable:
        raise SpecError(
            "optimizer",
            name,
            f"estimate-only ({opt.estimate_only_reason}); the trainer runs: "
            + ", ".join(TRAINABLE_OPTIMIZERS),
        )
    return opt


def dense_bytes_per_param(precision: Precision, optimizer: Optimizer) -> float:
    """Weights + gradients + master copy + optimizer state per parameter, for a non-factored
    optimizer: fp32 AdamW = 4 + 4 + 8 = 16 (seed 000, S-max-model); mixed AdamW = 2 + 2 + 12."""
    return (
        precision.weight_bytes
        + precision.grad_bytes
        + precision.master_bytes
        + optimizer.state_bytes_per_param(precision)
    )
