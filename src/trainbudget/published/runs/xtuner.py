"""Llama 2 7B, Yi-34B-200K and Llama 2 70B trained at 8K to 1M tokens a sequence on 8 to 64
A100-SXM4-80GB, from XTuner's speed benchmark (github.com/InternLM/xtuner
docs/zh_cn/acceleration/benchmark.rst, "速度基准" (speed benchmark), the table as fixed in commit
7575f2c, 2024-07-09; the file moved unchanged to docs/zh_cn/legacy/acceleration/ in 2025).

XTuner trains Hugging Face models under DeepSpeed with its own sequence parallelism, which
follows DeepSpeed-Ulysses (train_extreme_long_sequence.rst: each sequence split over
`sequence_parallel_size` GPUs, heads exchanged by all-to-all around attention). Each row links
its config (xtuner/configs/llama_speed_benchmark/): Alpaca (English and Chinese) packed to
`max_length` without variable-length attention (full causal attention over the packed
sequence), one packed sequence per GPU and micro-step, `accumulative_counts` equal to the
sequence-parallel size, AdamW, and SupervisedFinetune's default activation checkpointing of
every decoder layer. Each row gives TGS (tokens per GPU per second: the GPU's share of a
sequence over the iteration time, xtuner/engine/hooks/throughput_hook.py) and TFLOPs by the
same hook's count, which counts the recomputed forward; `xtuner_flops_per_gpu_token` is that
count and reproduces the column from TGS (tests).

The sequence-parallel degree is recorded as `layout.cp`: it splits each sequence over that many
GPUs as context parallelism does, so the compute per GPU is the same; the communication is
not (Ulysses' all-to-all of the projected heads, not a ring of key/value blocks), a difference
the notes name. Scored: TGS. No memory is reported. Left out: the Llama 2 70B 1M row, whose
linked config (llama2_70b_full_alpaca_enzh_1M_sp64.py) is not in the repository.
"""

from __future__ import annotations

from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.published.record import Layout, Measurement, PublishedRun, architecture, preset

_REPO = "github.com/InternLM/xtuner"
_TABLE = (
    f"XTuner speed benchmark, {_REPO} docs/zh_cn/acceleration/benchmark.rst (commit 7575f2c, "
    "2024-07-09), section '速度' (speed), the {model} table, row '{gpus} GPUs, {seq}'; the "
    "row's config xtuner/configs/llama_speed_benchmark/{config}."
)
_FRAMEWORK = (
    "the configs train through mmengine with xtuner's DeepSpeedStrategy (xtuner/tools/train.py "
    "'--deepspeed'); the sequence-parallel page: '需要使用 DeepSpeed 进行训练' (training "
    "needs DeepSpeed); Hugging Face AutoModelForCausalLM, no Megatron code"
)
_K = 1024
YI_34B_200K = architecture(
    name="yi-34b-200k",
    source="huggingface.co/01-ai/Yi-34B-200K config.json (hidden_size 7168, "
    "intermediate_size 20480, num_hidden_layers 60, vocab_size 64000, untied); Young et al. "
    "2024, Yi, arXiv:2403.04652, Table 1 (34B: 56 query heads, 8 key-value heads)",
    vocab_size=64000, d_model=7168, n_layers=60, n_heads=56, n_kv_heads=8, d_ff=20480,
    max_seq_len=200_000, mlp="swiglu", norm="rmsnorm", position="rope",
    tied_embeddings=False, bias=False, dropout=False,
)  # fmt: skip
MODELS = {
    "llama2-7b": preset("llama-2-7b"),
    "yi-34b": YI_34B_200K,
    "llama2-70b": preset("llama-2-70b"),
}

# model -> (GPUs, sequence in K tokens, sequence-parallel degree, TGS, TFLOPs) as the table
# prints them ('8k' = 8192, '1M' = 1048576 tokens: each config's max_length)
ROWS_STATED = {
    "llama2-7b": (
        (8, 8, 1, 3028.3, 185.3),
        (8, 32, 1, 2234.2, 193.0),
        (8, 128, 8, 948.6, 180.3),
        (8, 256, 8, 540.1, 176.9),
        (32, 1024, 16, 133.6, 153.9),
    ),
    "yi-34b": (
        (32, 8, 1, 485.1, 165.6),
        (32, 32, 2, 491.5, 209.1),
        (32, 128, 8, 251.1, 191.8),
        (32, 256, 8, 119.7, 145.3),
    ),
    "llama2-70b": (
        (32, 8, 1, 216.8, 144.7),
        (32, 32, 4, 300.9, 239.6),
        (32, 128, 8, 144.7, 189.7),
        (32, 256, 16, 63.8, 127.6),
    ),
}
_TABLE_NAME = {"llama2-7b": "Llama2-7B", "yi-34b": "Yi-34B-200K", "llama2-70b": "Llama2-70B"}
_CONFIG_STEM = {
    "llama2-7b": "llama2_7b/llama2_7b",
    "yi-34b": "yi_34b/yi_34b_200k",
    "llama2-70b": "llama2_70b/llama2_70b",
}


def xtuner_flops_per_gpu_token(model: ModelSpec, seq_len: int, sp: int) -> float:
    """ThroughputHook's count (throughput_hook.py at commit 7575f2c) per token a GPU holds, so
    TFLOPs = this x TGS / 1e12. Per GPU with s = seq_len / sp tokens: 4 x (8 s h^2 + 2 s^2 h sp
    (causal attention over the whole sequence for its h / sp heads) + 6 s h ffn (the 'mlp_ratio'
    x 1.5 gate)) x layers, 4 passes since checkpointing adds a forward, + 6 s h V for the head.
    It counts q, k, v and o as four h x h matrices whatever the key-value heads (GQA counted as
    multi-head)."""
    h, ffn, layers, vocab = model.d_model, model.d_ff, model.n_layers, model.vocab_size
    s = seq_len / sp
    per_layer = 8 * s * h * h + 2 * s * s * h * sp + 6 * s * h * ffn
    return (4 * per_layer * layers + 6 * s * h * vocab) / s


_NOTES = (
    "{gpus} x A100-SXM4-80GB (the page's 硬件 (hardware) list: 'NVIDIA A100-SXM4-80GB GPUs'), "
    "{nodes}. Config {config}: max_length {seq} (pack_to_max_length, use_varlen_attn False: "
    "Alpaca en+zh packed into full {seq}-token sequences, attention causal over the whole "
    "pack), sequence_parallel_size {sp} (recorded as cp {sp}: each sequence split over {sp} "
    "GPUs as context parallelism does; XTuner exchanges heads by all-to-all as DeepSpeed-"
    "Ulysses does, not a key/value ring), batch_size 1 per device, accumulative_counts {acc}: "
    "{dp} data-parallel group{s} x {acc} micro-steps = {batch} sequences a step. Full "
    "recomputation: SupervisedFinetune's use_activation_checkpointing=True default (every "
    "decoder layer; the TFLOPs column reproduces only with the hook's 4-pass count, tests). "
    "ZeRO-3 assumed: the table does not name the DeepSpeed config; the sequence-parallel page "
    "pairs sequence parallelism with ZeRO-3 ('可结合 ZeRO3 显存优化策略训练大尺寸模型') and its "
    "table 1 runs ZeRO-3; the 70B rows cannot hold 16-bit weights on one GPU without it. "
    "Precision: xtuner's deepspeed_zero3.json leaves fp16 and bf16 'auto' and "
    "auto_dtype_of_deepspeed_config turns bf16 on where supported (A100): bf16-mixed. "
    "{attention} Model: {model_note}. Figures: TGS {tgs} (scored), TFLOPs {tflops} "
    "(ThroughputHook count, {fpt:.4g} FLOPs per GPU-token: {check:.1f} TFLOP/s from TGS)."
)
_FLASH_SP = (
    "Attention: flash-attn 2 (the sequence-parallel page: '使用序列并行策略需要首先安装 flash "
    "attn'; xtuner dispatches Llama attention to it)."
)
_FLASH_ASSUMED = (
    "Attention: flash-attn 2 assumed as in the table's sequence-parallel rows of the same "
    "benchmark (the page does not list it for sp 1; xtuner dispatches to it when installed)."
)
_MODEL_NOTE = {
    "llama2-7b": "meta-llama/Llama-2-7b (preset llama-2-7b; positions past 4096 by RoPE "
    "without scaling, as the config leaves max_position_embeddings)",
    "yi-34b": "01-ai/Yi-34B-200K, spelled out (no preset): 60 layers, 7168 wide, 56 heads with "
    "8 key-value heads, SwiGLU 20480, vocabulary 64000",
    "llama2-70b": "meta-llama/Llama-2-70b-hf (preset llama-2-70b, 8 key-value heads)",
}


def _run(name: str, row: tuple[int, int, int, float, float]) -> PublishedRun:
    gpus, k, sp, tgs, tflops = row
    seq, model = k * _K, MODELS[name]
    dp, label = gpus // sp, "1M" if k == _K else f"{k}k"  # the table's and configs' label
    config = f"{_CONFIG_STEM[name]}_full_alpaca_enzh_{label}_sp{sp}.py"
    fpt = xtuner_flops_per_gpu_token(model, seq, sp)
    assumed = {"layout.zero"} | ({"layout.flash_attention"} if sp == 1 else set())
    return PublishedRun(
        id=f"xtuner-{name}-{label.lower()}-{gpus}gpu",
        source=_TABLE.format(model=_TABLE_NAME[name], gpus=gpus, seq=label, config=config),
        source_key="internlm-xtuner-speed",
        framework="deepspeed",
        framework_source=_FRAMEWORK,
        model=model,
        seq_len=seq, gpu="a100-80gb", n_gpus=gpus, gpus_per_node=8,
        layout=Layout(
            tp=1, pp=1, dp=dp, cp=sp, sp=False, recompute="full", zero=3, micro_batch=1,
            global_batch=dp * sp, flash_attention=True,
        ),
        measured=Measurement(tokens_per_second_per_gpu=tgs),
        assumed=frozenset(assumed),
        notes=_NOTES.format(
            gpus=gpus, nodes=f"{gpus // 8} node{'s' if gpus > 8 else ''} of 8", config=config,
            seq=seq, sp=sp, acc=sp, dp=dp, s="s" if dp > 1 else "", batch=dp * sp,
            attention=_FLASH_SP if sp > 1 else _FLASH_ASSUMED, model_note=_MODEL_NOTE[name],
            tgs=tgs, tflops=tflops, fpt=fpt, check=fpt * tgs / 1e12,
        ),
    )  # fmt: skip


XTUNER: tuple[PublishedRun, ...] = tuple(
    _run(name, row) for name, rows in ROWS_STATED.items() for row in rows
)
"""Thirteen rows: Llama 2 7B (8K-256K on 8 GPUs, 1M on 32), Yi-34B-200K and Llama 2 70B (8K-256K
on 32 GPUs)."""
