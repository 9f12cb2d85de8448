"""NVIDIA Megatron-Bridge's "Performance" summary, FP8: dense Llama 3 and 3.1 rows on DGX H100
and DGX B200 (source key nvidia-megatron-bridge-perf), on `nemo_perf`'s layout helper."""

from __future__ import annotations

from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.published.nvidia.nemo_perf import nemo_layout
from trainbudget.published.record import Layout, Measurement, PublishedRun, preset

# ==============================================================================================
# 3. Megatron-Bridge "Performance" summary (github.com/NVIDIA-NeMo/Megatron-Bridge
#    docs/performance-summary-archive.md at HEAD 4ab94dfad, 2026-08-11), dense Llama rows on
#    DGX-H100 and DGX-B200 (the GB200/GB300 rows are not in the hardware catalog).
# "25.11 NeMo Container", System: DGX-H100:
# | LLAMA3_8B | 8 | FP8-CS | 128 | 1 | 8192 | 8 | 1 | 1 | 1 | n/a | 1 | 16 | 14451 | 744 |
# | LLAMA3_70B | 64 | FP8-CS | 128 | 1 | 8192 | 0 | 4 | 8 | 1 | 5 | 1 | 64 | 1602 | 719 |
# | LLAMA3.1_405B | 1024 | FP8-CS | 512 | 1 | 8192 | 0 | 8 | 8 | 2 | 8 | 1 | 64 | 292 | 737 |
# (columns: Model | #-GPUs | Precision | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP |
#  EP | GA | Tokens / sec / GPU | Model TFLOP / sec / GPU); System: DGX-B200:
# | LLAMA3_8B | 8 | FP8-CS (FP8-MX) | 128 | 2 | 8192 | 0 | 1 | 1 | 1 | n/a | 1 | 8 |
#   30624 (29521) | 1576 (1519) |
# | LLAMA3.1_405B | 128 | FP8-CS (FP8-MX) | 64 | 1 | 8192 | 0 | 4 | 8 | 2 | 8 | 1 | 32 |
#   661 (624) | 1667 (1576) |
# "26.04 NeMo Container", Model: LLAMA3_70B:
# | DGX-H100 | 64 | FP8 | 256 | 1 | 8192 | 0 | 4 | 8 | 1 | 5 | n/a | 1633 | 734 |
# (the 26.04.01 section's row, 1664 tokens/s with 731 TFLOP/s, is 2.3 % inconsistent under the
#  page's own FLOP formula, where every other row agrees to 0.1 %: the 26.04 row is used)
# "26.06 NeMo Container", Model: LLAMA3.1_405B:
# | DGX-H100 | 1024 | FP8 | 1536 | 1 | 8192 | 8 | 8 | 2 | 8 | n/a | 326 | 822 |
# (columns: System | #-GPUs | Precision | GBS | MBS | Sequence Length | TP | PP | CP | VP | EP |
#  Tokens / sec / GPU | Model TFLOP / sec / GPU). The LLAMA3.1_405B rows split 126 layers over
# 8 x 8 virtual stages with the embedding and the loss counted as layers (Layout's
# embedding_in_pp_split and loss_in_pp_split).
# ==============================================================================================
_MB_SRC = (
    "NVIDIA Megatron-Bridge 'Performance' summary, github.com/NVIDIA-NeMo/Megatron-Bridge "
    "docs/performance-summary-archive.md (commit 4ab94dfad), section '{section}', {table} "
    "table, row {row}."
)
_MB_FRAMEWORK = (
    "the page: 'Megatron Bridge' (NeMo Framework, on Megatron-Core) with the NeMo container "
    "named in the section title"
)
_MB_NOTES = (
    "{gpu}, 8 per node, FP8 with current scaling (FP8-CS) as the row states. GPUs, GBS, MBS, "
    "sequence, TP, PP, CP, VP, GA, tokens/s and TFLOP/s from the row; DP = GPUs / (TP*PP*CP). "
    "Sequence parallelism exactly when TP > 1 (WorkloadBaseConfig.sequence_parallel in the "
    "recipe scripts/performance/utils/utils.py), and TP communication overlap with it "
    "(llama3_llm_pretrain.py: CommOverlapConfig(tp_comm_overlap=bool(tp > 1)) for 8B, the "
    "userbuffers config for 70B); gradients reduced in bf16 (the same file: "
    "grad_reduce_in_fp32 = False; framework row megatron-bridge-perf). Not stated, assumed: "
    "the distributed "
    "optimizer (zero=1) where the FSDP column is 0 and no recomputation. TFLOP/s counts NeMo's "
    "formula with the causal discount (nemo-causal; the test checks it against tokens/s). "
    "{extra}"
)


def _bridge(
    run_id: str,
    section: str,
    table: str,
    row: str,
    gpu: str,
    model: ModelSpec,
    layout: Layout,
    tokens: float,
    tflops: float,
    extra: str,
    assumed: frozenset[str] = frozenset(),
) -> PublishedRun:
    return PublishedRun(
        tp_comm_overlap=layout.tp > 1,
        id=run_id, source=_MB_SRC.format(section=section, table=table, row=row),
        source_key="nvidia-megatron-bridge-perf", framework="megatron-bridge-perf",
        framework_source=_MB_FRAMEWORK, model=model, seq_len=8192, gpu=gpu,
        n_gpus=layout.n_gpus, gpus_per_node=8, layout=layout, precision="fp8",
        measured=Measurement(
            tokens_per_second_per_gpu=tokens, tflops_per_second_per_gpu=tflops,
            flops_convention="nemo-causal",
        ),
        assumed=frozenset({"layout.recompute"}) | assumed,
        notes=_MB_NOTES.format(
            gpu="H100 SXM 80GB" if gpu == "h100-sxm" else "B200 180GB", extra=extra
        ),
    )  # fmt: skip


_S2511 = "25.11 NeMo Container / Pre-Training Performance"
_SPLIT_405B = (
    "126 layers over 8 x 8 virtual stages with the embedding and the loss counted as layers "
    "(src/megatron/bridge/recipes/llama/llama3.py llama31_405b_pretrain_config at 1804c076f: "
    "account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split True; "
    "the h100 recipes at 4ab94dfad keep both, 'required for 405B'): 2 slots a chunk, the "
    "first chunk the embedding and one layer, the last one layer and the loss."
)

# fmt: off
BRIDGE_PERF: tuple[PublishedRun, ...] = (
    _bridge("mbridge-2511-llama3-8b-h100-8gpu", _S2511, "System: DGX-H100", "LLAMA3_8B",
            "h100-sxm", preset("llama-3-8b"), nemo_layout(1, 1, 8, batch=128, zero=3), 14451, 744,
            "FSDP column 8: Megatron FSDP over the 8 data-parallel ranks (zero=3). The recipe "
            "of that release (scripts/performance/configs/llama/llama3_workload_base_configs.py"
            " at 1804c076f, LLAMA3_8B_PRETRAIN_CONFIG_H100_FP8_CS_BASE_CONFIG) sets "
            "recompute_num_layers=5 (5 of 32 layers fully recomputed), which the record "
            "cannot express: recompute='none' here, about 5 % less compute than the run did; "
            "that file does not set use_megatron_fsdp for this row, so zero=3 follows the "
            "table.", frozenset({"layout.zero"})),
    _bridge("mbridge-2511-llama3-70b-h100-64gpu", _S2511, "System: DGX-H100", "LLAMA3_70B",
            "h100-sxm", preset("llama-3-70b"), nemo_layout(4, 8, 2, vpp=5, batch=128), 1602, 719,
            "80 / (8*5) = 2 layers per virtual stage; TP communication overlap (userbuffers) "
            "in the recipe.", frozenset({"layout.zero"})),
    _bridge("mbridge-2511-llama3-8b-b200-8gpu", _S2511, "System: DGX-B200", "LLAMA3_8B",
            "b200", preset("llama-3-8b"), nemo_layout(1, 1, 8, micro=2, batch=128), 30624, 1576,
            "The FP8-CS figures; the bracketed MXFP8 ones (29521 tokens/s) are not recorded. "
            "CUDA graphs (full iteration) in the recipe.", frozenset({"layout.zero"})),
    _bridge("mbridge-2511-llama31-405b-h100-1024gpu", _S2511, "System: DGX-H100",
            "LLAMA3.1_405B", "h100-sxm", preset("llama-3-405b"),
            nemo_layout(8, 8, 8, cp=2, vpp=8, batch=512, embedding_and_loss_in_split=True),
            292, 737,
            _SPLIT_405B + " The recipe (LLAMA31_405B_PRETRAIN_CONFIG_H100_FP8_CS_BASE_CONFIG "
            "at 1804c076f) sets no recomputation.", frozenset({"layout.zero"})),
    _bridge("mbridge-2511-llama31-405b-b200-128gpu", _S2511, "System: DGX-B200",
            "LLAMA3.1_405B", "b200", preset("llama-3-405b"),
            nemo_layout(4, 8, 2, cp=2, vpp=8, batch=64, embedding_and_loss_in_split=True),
            661, 1667,
            _SPLIT_405B + " The FP8-CS figures; the bracketed MXFP8 ones (624 tokens/s) are not "
            "recorded. The recipe (LLAMA31_405B_PRETRAIN_CONFIG_B200_FP8_CS_BASE_CONFIG at "
            "1804c076f) sets no recomputation.", frozenset({"layout.zero"})),
    _bridge("mbridge-2606-llama31-405b-h100-1024gpu", "26.06 NeMo Container",
            "Model: LLAMA3.1_405B", "DGX-H100 / FP8", "h100-sxm", preset("llama-3-405b"),
            nemo_layout(8, 8, 8, cp=2, vpp=8, batch=1536, embedding_and_loss_in_split=True), 326,
            822, _SPLIT_405B + " The 25.11 row's layout with three times the batch (GA 192); "
            "the 26.04.01 section repeats it as 328 tokens/s and 827 TFLOP/s (not recorded: "
            "the same run).", frozenset({"layout.zero"})),
    _bridge("mbridge-2604-llama3-70b-h100-64gpu", "26.04 NeMo Container",
            "Model: LLAMA3_70B", "DGX-H100 / FP8", "h100-sxm", preset("llama-3-70b"),
            nemo_layout(4, 8, 2, vpp=5, batch=256), 1633, 734,
            "The same layout as the 25.11 row with twice the batch (GA 128); the table's FSDP "
            "column is 0. The 26.04.01 section repeats this row as 1664 tokens/s and 731 "
            "TFLOP/s, which disagree with each other by 2.3 % under the page's formula; the "
            "26.04 figures agree to 0.1 % and are used.", frozenset({"layout.zero"})),
)
# fmt: on
