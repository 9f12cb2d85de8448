"""What torch.compile (Inductor) makes of a decoder layer and of the cross-entropy, counted by
PyTorch itself on the CPU: the figures the step model's compiled path uses
(core.spec.frameworks.INDUCTOR_LAYER_KERNELS, core.parallel.timing.loss_time's
COMPILED_LOSS_KERNEL). Inductor's scheduler decides the fusions for its C++ and CUDA back ends
alike; GEMMs and attention run as extern kernels on both. Slow: compiling takes tens of seconds
of CPU."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.slow]

import torch.nn.functional as F  # noqa: E402
from torch._inductor.utils import run_and_get_code  # noqa: E402

from trainbudget.core.spec.frameworks import INDUCTOR_LAYER_KERNELS  # noqa: E402
from trainbudget.core.spec.presets import get_preset  # noqa: E402
from trainbudget.model.transformer import Block, rope_tables  # noqa: E402

GENERATED = re.compile(r"^(cpp_fused_\w+) = async_compile", re.M)
EXTERN = re.compile(r"(extern_kernels\.\w+|torch\.ops\.aten\.\w+\.\w+)\(")
ALLOC = re.compile(r"empty_strided_cpu\(\((.*?)\), \(.*?\), (torch\.\w+)\)")


def _compiled_code(fn, *args) -> list[str]:
    """The generated source of each graph (forward, then backward) of one call and backward."""

    def step():
        out = torch.compile(fn)(*args)
        (out if out.dim() == 0 else out.float().sum()).backward()

    torch._dynamo.reset()
    _, codes = run_and_get_code(step)
    return codes


def test_a_llama_layer_compiles_to_eleven_forward_kernels():
    """Llama-style layer (RMSNorm, RoPE, GQA, SwiGLU), shrunk to run on the CPU: the shapes do
    not change what fuses."""
    spec = get_preset("llama-3-8b").replace(
        d_model=256, n_heads=4, n_kv_heads=2, d_ff=512, n_layers=1
    )
    block = Block(spec, {"device": None, "dtype": torch.bfloat16})
    x = torch.randn(2, 128, spec.d_model, dtype=torch.bfloat16, requires_grad=True)
    forward, backward = _compiled_code(lambda h: block(h, rope_tables(128, spec.d_rope, None)), x)
    kernels = len(GENERATED.findall(forward)) + len(EXTERN.findall(forward))
    assert kernels == INDUCTOR_LAYER_KERNELS
    assert len(GENERATED.findall(forward)) == 5  # norms, RoPE, residual adds, SiLU x up
    assert len(GENERATED.findall(backward)) + len(EXTERN.findall(backward)) < 2 * 48


def test_the_compiled_cross_entropy_keeps_no_fp32_logits():
    """F.cross_entropy(logits.float()) compiled: one kernel each way, and no buffer of
    tokens x vocabulary in fp32 -- per-row statistics only; the backward writes the 16-bit
    gradient."""
    n, v = 512, 4096
    logits = torch.randn(n, v, dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(0, v, (n,))
    forward, backward = _compiled_code(lambda x: F.cross_entropy(x.float(), targets), logits)
    assert len(GENERATED.findall(forward)) == len(GENERATED.findall(backward)) == 1
    buffers = ALLOC.findall(forward) + ALLOC.findall(backward)
    assert (f"{n}, {v}", "torch.float32") not in buffers
    assert (f"{n}, {v}", "torch.bfloat16") in ALLOC.findall(backward)
