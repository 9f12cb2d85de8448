"""FP8 recipes as the frameworks run them (`FP8_RECIPES`): which GEMMs of a linear layer run in
FP8 and the HBM bytes their casts move per element of input, weight and output gradient, read
off Transformer Engine's docs and torchao's float8 code; `fp8_linear_extra_bytes` sums them for
one linear layer. The FP8 GEMMs' rate is `kernel_costs`'."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from trainbudget.core.errors import SpecError, unknown_key

_TE_DOCS = (
    "https://github.com/NVIDIA/TransformerEngine/blob/d0067d0/docs/features/low_precision_training/"
)
_TORCHAO = (
    "https://github.com/pytorch/ao/blob/36027d82d1ad9949597ea16002ff4940374b1b94/torchao/float8/"
)

GEMM_ROLES = ("fprop", "dgrad", "wgrad")


@dataclass(frozen=True, kw_only=True)
class Fp8Recipe:
    """What an FP8 recipe adds to one linear layer per forward + backward, all tensors bf16
    before casting. Bytes are HBM traffic per element of each tensor over the step."""

    name: str
    fp8_gemms: tuple[str, ...]
    """GEMMs run in FP8, of GEMM_ROLES; the others stay bf16. Outputs are bf16 in every case."""
    input_bytes_per_element: float
    weight_bytes_per_element: float
    grad_output_bytes_per_element: float
    kernels_per_linear: int | None
    """Extra kernels per linear per forward + backward, where the code path was counted."""
    fsdp_fp8_all_gather: bool
    """Whether FSDP can all-gather the weight as FP8 (1 byte per parameter instead of 2)."""
    saved_input_bytes: int = 2
    """Bytes per element a linear layer keeps of its input for backward: 1 where the recipe
    saves the FP8 cast it made for the forward GEMM (Transformer Engine's Linear and
    LayerNormLinear: `saved_inputmat = inputmat`, the FP8 tensor or its FP8 transpose, when FP8
    runs the weight-gradient GEMM), 2 where it saves the bf16 input (torchao's
    matmul_with_hp_or_float8_args saves input_hp and casts again in backward)."""
    runs_on: frozenset[str] | None = None
    """Catalog keys (`hardware.HARDWARE`) of the GPUs whose tensor cores run the recipe's GEMMs;
    None: every GPU with an FP8 rate."""
    source: str
    derivation: str


# fmt: off
FP8_RECIPES: Mapping[str, Fp8Recipe] = MappingProxyType({r.name: r for r in (
    Fp8Recipe(
        name="te-current", fp8_gemms=GEMM_ROLES, input_bytes_per_element=6,
        weight_bytes_per_element=6, grad_output_bytes_per_element=6, kernels_per_linear=None,
        fsdp_fp8_all_gather=False, saved_input_bytes=1,
        source=_TE_DOCS + "fp8_current_scaling/fp8_current_scaling.rst; introduction/"
        "introduction.rst ('Linear layer data flow')",
        derivation="Each of input, weight, output grad is quantized once into both FP8 layouts "
        "Hopper needs ('both input and input^T quantized versions are created'): an amax read "
        "(2 B), a cast read (2 B: 'reading the tensor twice'), two 1 B writes = 6 B. TE "
        "re-quantizes the weight every forward unless told it is not the first microbatch."),
    Fp8Recipe(
        name="te-delayed", fp8_gemms=GEMM_ROLES, input_bytes_per_element=4,
        weight_bytes_per_element=4, grad_output_bytes_per_element=4, kernels_per_linear=None,
        fsdp_fp8_all_gather=False, saved_input_bytes=1,
        source=_TE_DOCS + "fp8_delayed_scaling/fp8_delayed_scaling.rst",
        derivation="As te-current without the amax pass ('reduces tensor reads per "
        "quantization from two to one'): 2 B read + two 1 B writes = 4 B."),
    Fp8Recipe(
        name="torchao-tensorwise", fp8_gemms=GEMM_ROLES, input_bytes_per_element=10,
        weight_bytes_per_element=10, grad_output_bytes_per_element=10, kernels_per_linear=12,
        fsdp_fp8_all_gather=True,
        source=_TORCHAO + "float8_linear.py (matmul_with_hp_or_float8_args), float8_utils.py, "
        "config.py (enable_fsdp_float8_all_gather)",
        derivation="Under torch.compile. Six casts per linear (input and weight in forward; "
        "grad_output twice, weight and the saved bf16 input again in backward), each an amax "
        "reduction (2 B read) then a fused scale-clamp-cast (2 B read, 1 B write): 5 B per "
        "cast, 2 kernels (the reduction must finish before the cast) -- an upper bound, since "
        "the compiler may share the two grad_output amaxes."),
    Fp8Recipe(
        name="torchao-tensorwise-eager", fp8_gemms=GEMM_ROLES, input_bytes_per_element=68,
        weight_bytes_per_element=68, grad_output_bytes_per_element=68, kernels_per_linear=63,
        fsdp_fp8_all_gather=True,
        source=_TORCHAO + "float8_utils.py (tensor_to_amax, amax_to_scale, to_fp8_saturated), "
        "float8_training_tensor.py (_ToFloat8ConstrFunc), float8_ops.py (preprocess_addmm)",
        derivation="Without compile each cast is abs (2 B in, 2 out), max (2 in), "
        "to(float32) (2 in, 4 out), * scale (4, 4), clamp (4, 4), to(fp8) (4 in, 1 out) = 33 B "
        "and 10 kernels with the 4 scalar kernels of amax_to_scale; two casts per tensor, plus "
        "one fp8 layout copy (1 B in, 1 out) for each tensor's second GEMM in preprocess_addmm: "
        "66 + 2 = 68 B; 6 x 10 + 3 = 63 kernels."),
    Fp8Recipe(
        name="torchao-rowwise", fp8_gemms=GEMM_ROLES, input_bytes_per_element=14,
        weight_bytes_per_element=14, grad_output_bytes_per_element=10, kernels_per_linear=14,
        fsdp_fp8_all_gather=False,
        source=_TORCHAO + "config.py (Float8LinearRecipeName.ROWWISE; gemm_config_output "
        "fast-accum, the two backward GEMM configs not; FSDP float8 all-gather asserts "
        "tensorwise weights), float8_ops.py (addmm_float8_unwrapped); pytorch/pytorch#147971 "
        "(the rowwise CUTLASS GEMM against cuBLAS tensorwise on H100)",
        derivation="As torchao-tensorwise with one amax per row or column (same cast traffic). "
        "The backward GEMMs run without fast accumulation, where the rowwise CUTLASS kernel "
        "is slow, so torchao runs cuBLAS's tensorwise kernel at unit scales and then scales "
        "the bf16 result in place (output *= scale: 2 B read, 2 B written, one kernel): +4 B "
        "per element of the input gradient (the input's shape) and of the weight gradient (the "
        "weight's). The forward GEMM's rowwise kernel reaches 90-100 % of tensorwise on most "
        "shapes, down to 50 % on a few (pytorch#147971): no table, so not charged."),
    Fp8Recipe(
        name="torchao-rowwise-gw-hp", fp8_gemms=("fprop", "dgrad"), input_bytes_per_element=5,
        weight_bytes_per_element=10, grad_output_bytes_per_element=5, kernels_per_linear=8,
        fsdp_fp8_all_gather=False,
        source=_TORCHAO + "config.py (ROWWISE_WITH_GW_HP: 'grad_weight_hp = input_t_hp @ "
        "grad_output_hp')",
        derivation="Compiled; four casts (input once, weight twice, grad_output once), the "
        "weight gradient GEMM in bf16."),
    Fp8Recipe(
        name="te-mxfp8", fp8_gemms=GEMM_ROLES, input_bytes_per_element=4 + 2 / 32,
        weight_bytes_per_element=4 + 2 / 32, grad_output_bytes_per_element=4 + 2 / 32,
        kernels_per_linear=None, fsdp_fp8_all_gather=False, saved_input_bytes=1,
        runs_on=frozenset({"b200"}),
        source=_TE_DOCS + "mxfp8/mxfp8.rst",
        derivation="One E8M0 scale per 32 consecutive elements, computed from the block "
        "itself (no amax pass, no scale synchronisation). Rowwise (1x32) and columnwise (32x1) "
        "blocks differ, so each tensor is quantized twice from bf16: 2 B read, two 1 B FP8 "
        "copies and two 1/32 B scales written = 4.0625 B. Block-scaled GEMMs are native on "
        "Blackwell (SM 10.0, 10.3) only: 'Requires SM100 (Blackwell) or later'."),
)})
# fmt: on
"""Which linears are converted: Transformer Engine runs 'Linear operations' in low precision,
attention and 'other operations (layer normalization, softmax, etc.)' in high precision
(introduction.rst), i.e. the linears of its own modules; an LM head left as torch.nn.Linear stays
bf16. torchao converts every nn.Linear that `module_filter_fn` passes (float8_linear_utils.py):
the head too unless filtered out; its auto-filter skips dims not divisible by 16 and, tensorwise,
K <= 4096 with N <= 1024 (rowwise: N <= 2048, K <= 1024, or N <= 4096 with K <= 2048)."""


def get_fp8_recipe(name: str) -> Fp8Recipe:
    """The recipe `name`; an unknown name is an error listing the known ones."""
    if name not in FP8_RECIPES:
        raise unknown_key("fp8 recipe", name, FP8_RECIPES)
    return FP8_RECIPES[name]


def check_fp8_recipe_runs_on(name: str, gpu: str) -> None:
    """A recipe whose GEMMs the GPU cannot run (MXFP8 before Blackwell) is an error naming both."""
    runs_on = get_fp8_recipe(name).runs_on
    if runs_on is not None and gpu not in runs_on:
        rule = f"runs on {', '.join(sorted(runs_on))} only, not on {gpu}"
        raise SpecError("fp8_recipe", name, rule)


def fp8_linear_extra_bytes(m: Any, n: Any, k: Any, recipe: str) -> Any:
    """HBM bytes the FP8 casts of one linear (m tokens, k in_features, n out_features) move per
    forward + backward: input m k, weight k n, output gradient m n elements at the recipe's
    bytes per element. Time them at the HBM rate, as any memory-bound kernel."""
    r = get_fp8_recipe(recipe)
    return (
        m * k * r.input_bytes_per_element
        + k * n * r.weight_bytes_per_element
        + m * n * r.grad_output_bytes_per_element
    )
