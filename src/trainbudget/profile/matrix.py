"""The configurations every prediction is held to: GPT-2- and Llama-style small models,
batch 1-8, sequence 128-2048, fp32 and bf16-mixed, AdamW and SGD, recompute none and full.
The profile tests, docs/validation.md and scripts/gpu_validate.py all run this one list."""

from __future__ import annotations

from dataclasses import dataclass

from trainbudget.core.spec.model_spec import ModelSpec

# GPT-2 small's shape with 2 layers and GPT-2's vocabulary (biases, LayerNorm, GELU, learned
# positions, tied head); and a Llama-2-style model at a small width (RMSNorm, SwiGLU, RoPE,
# grouped-query attention, untied head; d_ff = 8/3 d rounded as Llama does).
GPT2_SMALL_2L = ModelSpec(
    name="gpt2-2l",
    vocab_size=50257,
    d_model=768,
    n_layers=2,
    n_heads=12,
    d_ff=3072,
    max_seq_len=2048,
    bias=True,
)
LLAMA_SMALL = ModelSpec(
    name="llama-small",
    vocab_size=32000,
    d_model=512,
    n_layers=4,
    n_heads=8,
    n_kv_heads=2,
    d_ff=1376,
    max_seq_len=2048,
    mlp="swiglu",
    norm="rmsnorm",
    position="rope",
    tied_embeddings=False,
)


@dataclass(frozen=True)
class Case:
    spec: ModelSpec
    micro_batch: int
    seq_len: int
    precision: str
    optimizer: str
    recompute: str

    @property
    def id(self) -> str:
        return (
            f"{self.spec.name}-b{self.micro_batch}-t{self.seq_len}-{self.precision}-"
            f"{self.optimizer}-{self.recompute}"
        )


def matrix() -> list[Case]:
    """32 cases: 2 models x 4 (batch, seq) shapes x {fp32, bf16-mixed} x {adamw + none,
    sgd + full} -- every axis value appears with both models and both precisions."""
    shapes = ((1, 128), (2, 512), (4, 1024), (8, 2048))
    cases = []
    for spec in (GPT2_SMALL_2L, LLAMA_SMALL):
        for b, t in shapes:
            for precision in ("fp32", "bf16-mixed"):
                cases.append(Case(spec, b, t, precision, "adamw", "none"))
                cases.append(Case(spec, b, t, precision, "sgd", "full"))
    return cases
