"""Meta's Llama reports (A100-80GB and H100-80GB): Llama 1 (§2.4, Table 15), Llama 2 (model card
'Carbon Footprint' table) and Llama 3 (model card 'Carbon Footprint' table).

Meta publishes one throughput figure (Llama 1 65B: "around 380 tokens/sec/GPU on 2048 A100
GPU") and, per model, the GPU-hours and tokens of the whole pre-training. From the latter a
run-average tokens/s/GPU = tokens / (GPU-hours x 3600) is derived (restarts, evaluation and
checkpointing included, so it is a lower bound on the steady-state rate). None of these sources
states the layout: every layout field here is an assumption, the same rule for every row (notes
of `_META_LAYOUT_NOTES`). Only the 65B row, a stated throughput, is scored; the GPU-hours rows
are listed but not scored (validation.EXCLUDED: layout not published, whole-run average).
"""

from __future__ import annotations

from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.published.record import Layout, Measurement, PublishedRun, architecture, preset

SECONDS_PER_HOUR = 3600


def tokens_per_second_per_gpu(tokens: float, gpu_hours: float) -> float:
    """Run-average throughput from a report's total tokens and total GPU-hours."""
    return tokens / (gpu_hours * SECONDS_PER_HOUR)


_META_LAYOUT_NOTES = (
    " Layout NOT published; the same assumed rule for every Meta row: 2048 GPUs (the Llama 1 "
    "cluster, §2.4), 8 per node, tensor parallel 8 with sequence parallelism ('model and "
    "sequence parallelism as described by Korthikanti et al.', Llama 1 §2.4), no pipeline, "
    "FSDP over the rest that shards gradients and optimizer states but keeps parameters "
    "unsharded after the forward (zero=2: the mode the Llama 3 paper, §3.3.2, documents for "
    "Meta's stack; with full sharding, zero=3, the predicted steps of the A100 rows were "
    "1.3-2.5x longer: this assumption decides the prediction), "
    "selective recomputation ('we save the "
    "activations that are expensive to compute, such as the outputs of linear layers', "
    "Llama 1 §2.4), one sequence per micro-batch, fused attention (xformers, Llama 1 §2.4)."
)
_META_ASSUMED = frozenset(
    {
        "framework",
        "n_gpus",
        "gpus_per_node",
        "layout.tp",
        "layout.pp",
        "layout.dp",
        "layout.sp",
        "layout.zero",
        "layout.recompute",
        "layout.micro_batch",
        "layout.flash_attention",
    }
)


META_FRAMEWORK = "other"
_META_FRAMEWORK_SOURCE = (
    "not named: the reports describe Meta's own training code (Llama 1 §2.4: the xformers "
    "attention and a hand-written backward), no public framework; 'other' assumed"
)
LLAMA1_SOURCE_KEY = "touvron-2023-llama1"


def _meta_layout(*, global_batch: int, tp: int = 8, n_gpus: int = 2048) -> Layout:
    return Layout(
        tp=tp, pp=1, dp=n_gpus // tp, sp=True, recompute="selective", zero=2,
        micro_batch=1, global_batch=global_batch, flash_attention=True,
    )  # fmt: skip


def _llama1(name: str, *, d_model: int, n_layers: int, n_heads: int, d_ff: int) -> ModelSpec:
    """A Llama 1 model: Table 2 dims; d_ff = 256 * ceil((8 * d_model / 3) / 256) (the Llama 1
    reference code's FFN width rule, `multiple_of=256`)."""
    return architecture(
        name=name,
        source="Touvron et al. 2023, arXiv:2302.13971, Table 2 (dims) and §2.2 (pre-norm "
        "RMSNorm, SwiGLU, rotary embeddings); vocab 32,000 (§2.1); d_ff by the reference "
        "code's rule",
        vocab_size=32000, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
        n_kv_heads=n_heads, d_ff=d_ff, max_seq_len=2048, mlp="swiglu", norm="rmsnorm",
        position="rope", tied_embeddings=False, bias=False, dropout=False,
    )  # fmt: skip


_LLAMA1_SRC = (
    "Touvron et al. 2023, 'LLaMA: Open and Efficient Foundation Language Models', "
    "arXiv:2302.13971, §2.4 'Efficient implementation', Table 2 (tokens, 4M batch) and Table 15 "
    "(GPU-hours per model, A100-80GB)"
)
_LLAMA1_NOTES = (
    "A100-80GB. Batch 4M tokens = 2048 sequences of 2048 (Table 2); tokens trained: 1.0T for "
    "7B/13B, 1.4T for 33B/65B (Table 2). GPU-hours from Table 15 (82,432 / 135,168 / 530,432 "
    "/ 1,022,362 for 7B/13B/33B/65B), read from a stored reading card of the paper and, for "
    "13B, a second third-party transcription (aiportalx.com). tokens/s/GPU = tokens / "
    "(GPU-hours x 3600), run average."
)

# fmt: off
LLAMA1: tuple[PublishedRun, ...] = (
    # §2.4: "When training a 65B-parameter model, our code processes around 380
    # tokens/sec/GPU on 2048 A100 GPU with 80GB of RAM. This means that training over our
    # dataset containing 1.4T tokens takes approximately 21 days."
    PublishedRun(
        id="llama1-65b-2048gpu",
        source=f"{_LLAMA1_SRC}; the figure is §2.4's sentence.",
        source_key=LLAMA1_SOURCE_KEY,
        framework=META_FRAMEWORK,
        framework_source=_META_FRAMEWORK_SOURCE,
        model=_llama1("llama-1-65b", d_model=8192, n_layers=80, n_heads=64, d_ff=22016),
        seq_len=2048, gpu="a100-80gb", n_gpus=2048, gpus_per_node=8,
        layout=_meta_layout(global_batch=2048),
        measured=Measurement(tokens_per_second_per_gpu=380),
        assumed=_META_ASSUMED - {"n_gpus"},
        notes=_LLAMA1_NOTES + " The 380 tokens/sec/GPU and 2048 GPUs are stated (§2.4); "
        "Table 15's 1,022,362 GPU-hours for 1.4T tokens give 380.4, the same figure."
        + _META_LAYOUT_NOTES,
    ),
    PublishedRun(
        id="llama1-33b-gpuhours",
        source=f"{_LLAMA1_SRC}; Table 15 row 'LLaMA-33B'.",
        source_key=LLAMA1_SOURCE_KEY,
        framework=META_FRAMEWORK,
        framework_source=_META_FRAMEWORK_SOURCE,
        model=_llama1("llama-1-33b", d_model=6656, n_layers=60, n_heads=52, d_ff=17920),
        seq_len=2048, gpu="a100-80gb", n_gpus=2048, gpus_per_node=8,
        layout=_meta_layout(global_batch=2048, tp=4),
        measured=Measurement(tokens_per_second_per_gpu=tokens_per_second_per_gpu(1.4e12, 530_432)),
        assumed=_META_ASSUMED,
        notes=_LLAMA1_NOTES + _META_LAYOUT_NOTES + " Exception: tp=4, since 52 heads do not "
        "split over 8.",
    ),
    PublishedRun(
        id="llama1-13b-gpuhours",
        source=f"{_LLAMA1_SRC}; Table 15 row 'LLaMA-13B'.",
        source_key=LLAMA1_SOURCE_KEY,
        framework=META_FRAMEWORK,
        framework_source=_META_FRAMEWORK_SOURCE,
        # Llama 1 13B has Llama 2 13B's shapes (Table 2: 5120, 40 heads, 40 layers) at 2k context
        model=preset("llama-2-13b", max_seq_len=2048),
        seq_len=2048, gpu="a100-80gb", n_gpus=2048, gpus_per_node=8,
        layout=_meta_layout(global_batch=2048),
        measured=Measurement(tokens_per_second_per_gpu=tokens_per_second_per_gpu(1.0e12, 135_168)),
        assumed=_META_ASSUMED,
        notes=_LLAMA1_NOTES + _META_LAYOUT_NOTES,
    ),
    PublishedRun(
        id="llama1-7b-gpuhours",
        source=f"{_LLAMA1_SRC}; Table 15 row 'LLaMA-7B'.",
        source_key=LLAMA1_SOURCE_KEY,
        framework=META_FRAMEWORK,
        framework_source=_META_FRAMEWORK_SOURCE,
        # Llama 1 7B has Llama 2 7B's shapes (Table 2: 4096, 32 heads, 32 layers) at 2k context
        model=preset("llama-2-7b", max_seq_len=2048),
        seq_len=2048, gpu="a100-80gb", n_gpus=2048, gpus_per_node=8,
        layout=_meta_layout(global_batch=2048),
        measured=Measurement(tokens_per_second_per_gpu=tokens_per_second_per_gpu(1.0e12, 82_432)),
        assumed=_META_ASSUMED,
        notes=_LLAMA1_NOTES + _META_LAYOUT_NOTES,
    ),
)
# fmt: on

# ----------------------------------------------------------------------------------------------
# Llama 2 model card (meta-llama/llama MODEL_CARD.md, 'Hardware and Software'):
# "Pretraining utilized a cumulative 3.3M GPU hours of computation on hardware of type
#  A100-80GB (TDP of 350-400W)."
# "|Llama 2 7B|184320|400|31.22|"  "|Llama 2 13B|368640|400|62.44|"
# "|Llama 2 70B|1720320|400|291.42|"  "|Total|3311616||539.00|"
# Touvron et al. 2023b (arXiv:2307.09288) Table 1: 2.0T tokens for every size, context 4k,
# "All models are trained with a global batch-size of 4M tokens."
# ----------------------------------------------------------------------------------------------
_LLAMA2_SRC = (
    "Touvron et al. 2023, 'Llama 2', arXiv:2307.09288, Table 1 (2.0T tokens, 4k context, 4M "
    "batch) and Table 2 (GPU-hours), as printed in the meta-llama/llama MODEL_CARD.md table "
    "'CO2 emissions during pretraining'"
)
_LLAMA2_NOTES = (
    "A100-80GB (RSC at 400 W with InfiniBand, production clusters at 350 W with RoCE, both "
    "200 Gb/s per endpoint, paper §2.2.1); which cluster each model used is not stated. Batch "
    "4M tokens = 1024 sequences of 4096. tokens/s/GPU = 2.0e12 / (GPU-hours x 3600), run "
    "average."
)
_LLAMA2_34B = architecture(
    name="llama-2-34b",
    source="never released; Code Llama 34B (initialised from it) config.json: 48 layers, 8192 "
    "hidden, 64 heads, 8 KV heads (paper Table 1: GQA), 22016 FFN, vocab 32000",
    vocab_size=32000, d_model=8192, n_layers=48, n_heads=64, n_kv_heads=8, d_ff=22016,
    max_seq_len=4096, mlp="swiglu", norm="rmsnorm", position="rope",
    tied_embeddings=False, bias=False, dropout=False,
)  # fmt: skip


def _llama2(
    run_id: str,
    row: str,
    model: ModelSpec,
    gpu_hours: int,
    *,
    extra: str = "",
    extra_assumed: frozenset[str] = frozenset(),
) -> PublishedRun:
    return PublishedRun(
        id=run_id,
        source=f"{_LLAMA2_SRC}, row '{row}'.",
        source_key="touvron-2023-llama2",
        framework=META_FRAMEWORK,
        framework_source=_META_FRAMEWORK_SOURCE,
        model=model,
        seq_len=4096, gpu="a100-80gb", n_gpus=2048, gpus_per_node=8,
        layout=_meta_layout(global_batch=1024),
        measured=Measurement(tokens_per_second_per_gpu=tokens_per_second_per_gpu(2e12, gpu_hours)),
        assumed=_META_ASSUMED | extra_assumed,
        notes=_LLAMA2_NOTES + extra + _META_LAYOUT_NOTES,
    )  # fmt: skip


LLAMA2: tuple[PublishedRun, ...] = (
    _llama2("llama2-7b-gpuhours", "Llama 2 7B", preset("llama-2-7b"), 184_320),
    _llama2("llama2-13b-gpuhours", "Llama 2 13B", preset("llama-2-13b"), 368_640),
    _llama2(
        "llama2-34b-gpuhours",
        "Total minus the other rows",
        _LLAMA2_34B,
        3_311_616 - 2_273_280,
        extra=" The card omits the unreleased 34B; its GPU-hours are the card's Total minus "
        "the three rows: 3,311,616 - (184,320 + 368,640 + 1,720,320) = 1,038,336 (paper "
        "Table 2). Dims from the Code Llama 34B config, assumed equal to Llama 2 34B's.",
        extra_assumed=frozenset(
            {"model.d_model", "model.n_layers", "model.n_heads", "model.n_kv_heads", "model.d_ff"}
        ),
    ),
    _llama2("llama2-70b-gpuhours", "Llama 2 70B", preset("llama-2-70b"), 1_720_320),
)

# ----------------------------------------------------------------------------------------------
# Llama 3 model card (meta-llama/llama3 MODEL_CARD.md, 'Hardware and Software'):
# "Pretraining utilized a cumulative 7.7M GPU hours of computation on hardware of type
#  H100-80GB (TDP of 700W)."  "|Llama 3 8B|1.3M|700|390|"  "|Llama 3 70B|6.4M|700|1900|"
# "Llama 3 was pretrained on over 15 trillion tokens of data"
# ----------------------------------------------------------------------------------------------
_LLAMA3_CARD_SRC = (
    "Meta, Llama 3 model card (meta-llama/llama3 MODEL_CARD.md), section 'Hardware and "
    "Software', table 'Carbon Emissions During Pretraining'"
)
_LLAMA3_CARD_NOTES = (
    "H100-80GB at 700 W. GPU-hours are printed rounded (1.3M, 6.4M) and the tokens as 'over 15 "
    "trillion': tokens/s/GPU = 15e12 / (GPU-hours x 3600) is uncertain by several per cent "
    "and a lower bound in tokens. Batch NOT stated for 8B/70B: 2048 sequences of 8192 (16M "
    "tokens, the 405B run's final batch, Llama 3 paper §3.4.1) assumed."
)


def _llama3_card(run_id: str, row: str, name: str, gpu_hours: float) -> PublishedRun:
    return PublishedRun(
        id=run_id,
        source=f"{_LLAMA3_CARD_SRC}, row '{row}'.",
        # the card is the Llama 3 paper's companion (same team, cluster and training stack):
        # one source with the 405B rows of open_models.py, not an independent one
        source_key="meta-2024-llama3",
        framework=META_FRAMEWORK,
        framework_source=_META_FRAMEWORK_SOURCE,
        model=preset(name),
        seq_len=8192, gpu="h100-sxm", n_gpus=2048, gpus_per_node=8,
        layout=_meta_layout(global_batch=2048),
        measured=Measurement(tokens_per_second_per_gpu=tokens_per_second_per_gpu(15e12, gpu_hours)),
        assumed=_META_ASSUMED | {"layout.global_batch"},
        notes=_LLAMA3_CARD_NOTES + _META_LAYOUT_NOTES,
    )  # fmt: skip


LLAMA3_CARD: tuple[PublishedRun, ...] = (
    _llama3_card("llama3-8b-gpuhours", "Llama 3 8B", "llama-3-8b", 1.3e6),
    _llama3_card("llama3-70b-gpuhours", "Llama 3 70B", "llama-3-70b", 6.4e6),
)
