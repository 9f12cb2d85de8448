"""Llama 3 8B and 70B pre-training on H100 with Megatron-Core, in bf16 and FP8, from BAAI's
FlagPerf benchmark suite (github.com/FlagOpen/FlagPerf training/nvidia/llama3_8B-megatron and
llama3_70B-megatron READMEs, table "性能指标" (performance figures)), with each run's memory.

FlagPerf runs each case from a benchmark script (training/benchmarks/llama3_8B/ and
llama3_70B/megatron/pretrain_llama3.sh: Megatron-Core `pretrain_gpt.py`, sequence 8192, global
batch 512 = 4M tokens, `--sequence-parallel`, `--bf16`, `--use-distributed-optimizer`,
Transformer Engine, flash attention) with the vendor's parallel sizes (config_H100x1x8.py:
micro-batch 1, TP 2, PP 1) and, for FP8, training_adapter_H100_fp8.sh (`--fp8-format hybrid`,
amax history 1024: Transformer Engine's delayed scaling). Each row gives tokens per GPU per
second (token/p/s, scored), the memory in use as "used/80" GiB and MFU by the PaLM definition
over 989 TFLOP/s.

Left out: the llama3_8B page's A800 row (the catalog has no A800, whose NVLink is 400 GB/s),
and the other LLM pages of the suite, whose 'amp' precision (fp16 or bf16) is not stated.
"""

from __future__ import annotations

from trainbudget.core.units import GiB
from trainbudget.published.record import Layout, Measurement, PublishedRun, preset

_REPO = "github.com/FlagOpen/FlagPerf"
SEQ_LEN = 8192
GLOBAL_BATCH = 512
"""pretrain_llama3.sh: '--global-batch-size 512' (the README: 'globalbatchsize=4M tokens')."""

_FRAMEWORK = (
    "the README: '训练框架版本：megatron-core tag:core_v0.6.0', '实施者：megatron-core'; "
    "pretrain_llama3.sh runs Megatron's pretrain_gpt.py with '--use-mcore-models'"
)
_ASSUMED = frozenset({"gpu", "layout.recompute", "measured.memory_measure"})
_NOTES = (
    "{gpus} x H100 SXM ({gpu_note}), {nodes}. Layout from the row's 'parallel' column "
    "({parallel}), micro-batch 1 (config_H100x1x8.py 'localbs = 1'), sequence 8192, global "
    "batch 512 (pretrain_llama3.sh): {accum} accumulation steps. --sequence-parallel, "
    "--use-distributed-optimizer (zero=1), Transformer Engine, flash attention (the script). "
    "Recomputation: the README lists 'recompute-activations' (Megatron's selective "
    "recomputation) among its optimisations; the script does not show the flag (assumed as "
    "the README states). {precision_note} Model: Llama 3 {size} (preset; the script's "
    "--num-layers, --hidden-size, --ffn-hidden-size, --num-query-groups match it; Llama 3 "
    "tokenizer). Figures: token/p/s {tps}; memory '{mem}/80' GiB, read as the device memory "
    "in use (the page: 'mem ... 通常称为“显存”, 单位为GiB', how it is sampled not stated; the "
    "'used/total' form is nvidia-smi's, so memory_measure 'device', assumed); "
    "MFU {mfu} (the PaLM definition over 989 TFLOP/s; 6 x {nominal} x token/p/s reproduces "
    "it, tests)."
)
_BF16_NOTE = "bf16 (--bf16: fp32 master weights in Megatron's optimizer)."
_FP8_NOTE = (
    "FP8: training_adapter_H100_fp8.sh adds '--fp8-format hybrid --fp8-amax-compute-algo max "
    "--fp8-amax-history-len 1024' to --bf16 (Transformer Engine's delayed scaling on the "
    "linear layers); MFU given as a range between the bf16 and FP8 peaks."
)


def _run(
    run_id: str, size: str, n_gpus: int, layout: tuple[int, int, int], precision: str,
    tps: float, mem_gib: int, mfu: str, readme: str,
) -> PublishedRun:  # fmt: skip
    tp, pp, dp = layout
    fp8 = precision == "fp8"
    return PublishedRun(
        id=run_id,
        source=f"BAAI FlagPerf, {_REPO} training/nvidia/{readme}/README.md, table '性能指标' "
        f"(performance figures), the row of {n_gpus} H100, PP{pp}DP{dp}TP{tp}, "
        f"{'bf16+fp8' if fp8 else 'bf16'}; the run's script training/benchmarks/llama3_{size}/"
        "megatron/pretrain_llama3.sh.",
        source_key="baai-flagperf",
        framework="megatron",
        framework_source=_FRAMEWORK,
        model=preset(f"llama-3-{size.lower()}"),
        seq_len=SEQ_LEN, gpu="h100-sxm", n_gpus=n_gpus, gpus_per_node=8,
        layout=Layout(
            tp=tp, pp=pp, dp=dp, sp=tp > 1, recompute="selective", zero=1, micro_batch=1,
            global_batch=GLOBAL_BATCH, flash_attention=True,
        ),
        precision="fp8" if fp8 else "bf16-mixed",
        measured=Measurement(
            tokens_per_second_per_gpu=tps, memory_bytes_per_gpu=mem_gib * GiB,
            memory_measure="device",
        ),
        assumed=_ASSUMED,
        notes=_NOTES.format(
            gpus=n_gpus,
            gpu_note="the 70B page: 'NVIDIA_H100-SXM4-80GB', InfiniBand 400Gb/s" if size == "70B"
            else "the 8B page names no variant: SXM assumed, its config's 'theoryflops = "
            "989000000000000.0' is H100 SXM's dense bf16 peak",
            nodes=f"{n_gpus // 8} node{'s' if n_gpus > 8 else ''} of 8",
            parallel=f"PP{pp}DP{dp}TP{tp}", accum=GLOBAL_BATCH // dp,
            precision_note=_FP8_NOTE if fp8 else _BF16_NOTE, size=size, tps=tps, mem=mem_gib,
            mfu=mfu, nominal="8e9" if size == "8B" else "70e9",
        ),
    )  # fmt: skip


_8B = "llama3_8B-megatron"
_70B = "llama3_70B-megatron"
# fmt: off
FLAGPERF: tuple[PublishedRun, ...] = (
    # | H100单机8卡（1x8）  | bf16      | PP1DP4TP2 | / | 8103  | True | 71/80 | 39.3%       |
    _run("flagperf-llama3-8b-h100-8gpu-bf16", "8B", 8, (2, 1, 4), "bf16", 8103, 71, "39.3%", _8B),
    # | H100单机8卡（1x8）  | bf16+fp8  | PP1DP4TP2 | / | 10486 | True | 74/80 | 25.4%-50.6% |
    _run("flagperf-llama3-8b-h100-8gpu-fp8", "8B", 8, (2, 1, 4), "fp8", 10486, 74,
         "25.4%-50.6%", _8B),
    # | H100二机16卡（2x8） | bf16      | PP1DP8TP2 | / | 7914  | True | 62/80 | 38.4%       |
    _run("flagperf-llama3-8b-h100-16gpu-bf16", "8B", 16, (2, 1, 8), "bf16", 7914, 62, "38.4%",
         _8B),
    # | H100二机16卡（2x8） | bf16+fp8  | PP1DP8TP2 | / | 10280 | True | 64/80 | 24.9%-49.9% |
    _run("flagperf-llama3-8b-h100-16gpu-fp8", "8B", 16, (2, 1, 8), "fp8", 10280, 64,
         "24.9%-49.9%", _8B),
    # | H100八机64卡（8x8） | bf16      | PP4DP2TP8 | / | 851   | True | 55/80 | 36.1%       |
    _run("flagperf-llama3-70b-h100-64gpu-bf16", "70B", 64, (8, 4, 2), "bf16", 851, 55, "36.1%",
         _70B),
)
# fmt: on
