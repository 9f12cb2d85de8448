"""Narayanan et al. 2021 (arXiv:2104.04473, SC21): every row of Table 1 and Table 2.

Table 1 (§5.1) is the weak-scaling sweep of Megatron GPT models from 1.7B to 1T parameters on
Selene (DGX A100 80GB, 8x HDR InfiniBand per node); Table 2 (§5.2) sets PTD-P (tensor +
pipeline + data parallelism) beside DeepSpeed's ZeRO-3 without model parallelism for the 175B
and 530B models. §5.1: "we use the interleaved pipeline schedule with the scatter/gather
optimization enabled. All models use a vocabulary size (denoted by V) of 51,200 (multiple of
1024) and a sequence length (s) of 2048." Eq. 3: F = 96Bslh^2(1 + s/6h + V/16lh) per
iteration, "assumes activation recomputation". Throughput "includes all operations including
data loading, optimizer steps, communication, and logging".
"""

from __future__ import annotations

from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.published.megatron import _GPT_1T, _GPT_175B, _GPT_530B, _megatron_gpt
from trainbudget.published.record import Layout, Measurement, PublishedRun

_SRC = (
    "Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training on GPU Clusters "
    "Using Megatron-LM', SC21, arXiv:2104.04473; text read from a markdown conversion of "
    "the paper stored in the code index (find_string 'Number of parameters (billion)')."
)
_PTD_FRAMEWORK = (
    "the title: '... on GPU Clusters Using Megatron-LM' (the paper's own implementation)"
)
_ZERO3_FRAMEWORK = (
    "§5.2: 'We integrated ZeRO into our codebase using the DeepSpeed Python library' "
    "(Megatron's model code, DeepSpeed's ZeRO-3 engine)"
)
# Table 1 does not give the micro-batch, nor how many model chunks the interleaved schedule
# put on each pipeline rank. Every Table 1 row takes micro-batch 1 (Table 2's PTD rows state
# 1) and, where pp > 1, the smallest interleaving above 1 that divides the stage's layers.
_TABLE1_ASSUMED = frozenset({"layout.micro_batch", "model.dropout"})
_TABLE1_NOTES = (
    "Table 1 states heads, hidden size, layers, TP, PP, GPUs, batch and achieved TFLOP/s per "
    "GPU; dp = GPUs / (TP * PP). Micro-batch not stated: 1 assumed (Table 2's PTD rows use "
    "1). The interleaved schedule is stated for §5.1, its model chunks per rank are not: "
    "where pp > 1, the smallest vpp > 1 dividing the layers per stage is assumed "
    "(layout.vpp named in assumed). Full recomputation: eq. 3 counts it. The step time is "
    "derived from the TFLOP/s with eq. 3, not published."
)


def _run(
    run_id: str,
    row: str,
    model: ModelSpec,
    *,
    tp_pp_dp: tuple[int, int, int],
    batch: int,
    tflops: float,
    micro: int = 1,
    vpp: int = 1,
    zero: int = 0,
    assumed: frozenset[str],
    notes: str,
) -> PublishedRun:
    """One row: full recomputation, no SP, 2048-token sequences on DGX A100 80GB."""
    tp, pp, dp = tp_pp_dp
    return PublishedRun(
        id=run_id,
        source=f"{_SRC} {row}",
        source_key="narayanan-2021",
        framework="megatron-deepspeed-2021" if zero == 3 else "megatron-legacy",
        framework_source=_ZERO3_FRAMEWORK if zero == 3 else _PTD_FRAMEWORK,
        model=model,
        seq_len=2048,
        gpu="a100-80gb",
        n_gpus=tp * pp * dp,
        gpus_per_node=8,
        layout=Layout(
            tp=tp,
            pp=pp,
            dp=dp,
            vpp=vpp,
            sp=False,
            recompute="full",
            zero=zero,
            micro_batch=micro,
            global_batch=batch,
            flash_attention=False,
        ),
        measured=Measurement(tflops_per_second_per_gpu=tflops, flops_convention="megatron-96Bslh2"),
        assumed=assumed,
        notes=notes,
    )


def _table1(
    run_id: str,
    row: str,
    model: ModelSpec,
    *,
    tp_pp_dp: tuple[int, int, int],
    batch: int,
    tflops: float,
    vpp: int = 1,
) -> PublishedRun:
    assumed = _TABLE1_ASSUMED | ({"layout.vpp"} if tp_pp_dp[1] > 1 else set())
    return _run(
        run_id, f"Table 1, row {row}.", model, tp_pp_dp=tp_pp_dp, batch=batch, tflops=tflops,
        vpp=vpp, assumed=assumed, notes=_TABLE1_NOTES,
    )  # fmt: skip


# Table 2 gives 'model-parallel size' 96 (175B) and 280 (530B): split as TP = 8 (the GPUs of a
# node, the paper's rule for TP) times PP = 12 and 35. Whether those rows used the interleaved
# schedule is not stated: vpp = 1 assumed. Micro-batch and batch are stated.
_PTD_ASSUMED = frozenset({"layout.tp", "layout.pp", "layout.vpp", "model.dropout"})
_PTD_NOTES = (
    "Table 2, PTD Parallelism: model-parallel size split as TP=8 x PP (TP = GPUs per node); "
    "interleaving not stated, vpp=1 assumed; micro-batch 1 stated; full recomputation (eq. 3 "
    "counts it). Step time derived from the TFLOP/s with eq. 3."
)
# ZeRO-3 rows: model-parallel size 1, so dp = GPUs; batch = GPUs x micro-batch (one
# micro-batch per step). Recomputation is not stated for them; eq. 3, which counts it, is the
# paper's one FLOP formula, so full recomputation is assumed.
_ZERO3_ASSUMED = frozenset({"layout.recompute", "model.dropout"})
_ZERO3_NOTES = (
    "Table 2, 'ZeRO-3 without Model Parallelism': model-parallel size 1, batch, GPUs and "
    "micro-batch stated (batch = GPUs x micro-batch: no gradient accumulation). Full "
    "recomputation assumed (eq. 3, which counts it, is the paper's only FLOP formula). "
    "Footnote: the 530B model did not fit on 560 GPUs at micro-batch 4, so its first row "
    "uses 640 GPUs and batch 2560. Step time derived from the TFLOP/s with eq. 3."
)


def _ptd(run_id: str, model: ModelSpec, pp: int, dp: int, batch: int, tflops: float):
    n_gpus = 8 * pp * dp
    return _run(
        run_id, f"Table 2, PTD Parallelism, {n_gpus} GPUs.", model, tp_pp_dp=(8, pp, dp),
        batch=batch, tflops=tflops, assumed=_PTD_ASSUMED, notes=_PTD_NOTES,
    )  # fmt: skip


def _zero3(run_id: str, model: ModelSpec, n_gpus: int, micro: int, tflops: float):
    return _run(
        run_id, f"Table 2, ZeRO-3 without Model Parallelism, {n_gpus} GPUs.", model,
        tp_pp_dp=(1, 1, n_gpus), batch=n_gpus * micro, tflops=tflops, micro=micro, zero=3,
        assumed=_ZERO3_ASSUMED, notes=_ZERO3_NOTES,
    )  # fmt: skip


_GPT_145B = _megatron_gpt("megatron-gpt-145b", 80, 12288, 96)

# fmt: off
NARAYANAN: tuple[PublishedRun, ...] = (
    # Table 1 columns: params (B) | heads | hidden | layers | TP | PP | GPUs | batch |
    #   TFLOP/s per GPU | % of peak | aggregate PFLOP/s
    # "| 1.7 | 24 | 2304 | 24 | 1 | 1 | 32 | 512 | 137 | 44% | 4.4 |"
    _table1("narayanan-1.7b-32gpu", "1.7B", _megatron_gpt("megatron-gpt-1.7b", 24, 2304, 24),
            tp_pp_dp=(1, 1, 32), batch=512, tflops=137),
    # "| 3.6 | 32 | 3072 | 30 | 2 | 1 | 64 | 512 | 138 | 44% | 8.8 |"
    _table1("narayanan-3.6b-64gpu", "3.6B", _megatron_gpt("megatron-gpt-3.6b", 30, 3072, 32),
            tp_pp_dp=(2, 1, 32), batch=512, tflops=138),
    # "| 7.5 | 32 | 4096 | 36 | 4 | 1 | 128 | 512 | 142 | 46% | 18.2 |"
    _table1("narayanan-7.5b-128gpu", "7.5B", _megatron_gpt("megatron-gpt-7.5b", 36, 4096, 32),
            tp_pp_dp=(4, 1, 32), batch=512, tflops=142),
    # "| 18.4 | 48 | 6144 | 40 | 8 | 1 | 256 | 1024 | 135 | 43% | 34.6 |"
    _table1("narayanan-18b-256gpu", "18.4B", _megatron_gpt("megatron-gpt-18b", 40, 6144, 48),
            tp_pp_dp=(8, 1, 32), batch=1024, tflops=135),
    # "| 39.1 | 64 | 8192 | 48 | 8 | 2 | 512 | 1536 | 138 | 44% | 70.8 |" (24 layers a stage)
    _table1("narayanan-39b-512gpu", "39.1B", _megatron_gpt("megatron-gpt-39b", 48, 8192, 64),
            tp_pp_dp=(8, 2, 32), batch=1536, tflops=138, vpp=2),
    # "| 76.1 | 80 | 10240 | 60 | 8 | 4 | 1024 | 1792 | 140 | 45% | 143.8 |" (15 a stage)
    _table1("narayanan-76b-1024gpu", "76.1B", _megatron_gpt("megatron-gpt-76b", 60, 10240, 80),
            tp_pp_dp=(8, 4, 32), batch=1792, tflops=140, vpp=3),
    # "| 145.6 | 96 | 12288 | 80 | 8 | 8 | 1536 | 2304 | 148 | 47% | 227.1 |" (10 a stage)
    _table1("narayanan-145b-1536gpu", "145.6B", _GPT_145B,
            tp_pp_dp=(8, 8, 24), batch=2304, tflops=148, vpp=2),
    # "| 310.1 | 128 | 16384 | 96 | 8 | 16 | 1920 | 2160 | 155 | 50% | 297.4 |" (6 a stage)
    _table1("narayanan-310b-1920gpu", "310.1B", _megatron_gpt("megatron-gpt-310b", 96, 16384, 128),
            tp_pp_dp=(8, 16, 15), batch=2160, tflops=155, vpp=2),
    # "| 529.6 | 128 | 20480 | 105 | 8 | 35 | 2520 | 2520 | 163 | 52% | 410.2 |" (3 a stage)
    _table1("narayanan-530b-2520gpu", "529.6B", _GPT_530B,
            tp_pp_dp=(8, 35, 9), batch=2520, tflops=163, vpp=3),
    # "| 1008.0 | 160 | 25600 | 128 | 8 | 64 | 3072 | 3072 | 163 | 52% | 502.0 |" (2 a stage)
    _table1("narayanan-1t-3072gpu", "1008.0B", _GPT_1T,
            tp_pp_dp=(8, 64, 6), batch=3072, tflops=163, vpp=2),
    # Table 2 columns: scheme | params (B) | model-parallel size | batch | GPUs | micro-batch |
    #   TFLOP/s per GPU | days for 300B tokens
    # PTD: "174.6 | 96 | 1536 | 384 | 1 | 153 | 84", "768 | 1 | 149 | 43", "1536 | 1 | 141 | 23"
    _ptd("narayanan-175b-ptd-384gpu", _GPT_175B, pp=12, dp=4, batch=1536, tflops=153),
    _ptd("narayanan-175b-ptd-768gpu", _GPT_175B, pp=12, dp=8, batch=1536, tflops=149),
    _ptd("narayanan-175b-ptd-1536gpu", _GPT_175B, pp=12, dp=16, batch=1536, tflops=141),
    # PTD: "529.6 | 280 | 2240 | 560 | 1 | 171 | 156", "1120 | 1 | 167 | 80",
    #   "2240 | 1 | 159 | 42"
    _ptd("narayanan-530b-ptd-560gpu", _GPT_530B, pp=35, dp=2, batch=2240, tflops=171),
    _ptd("narayanan-530b-ptd-1120gpu", _GPT_530B, pp=35, dp=4, batch=2240, tflops=167),
    _ptd("narayanan-530b-ptd-2240gpu", _GPT_530B, pp=35, dp=8, batch=2240, tflops=159),
    # ZeRO-3: "174.6 | 1 | 1536 | 384 | 4 | 144 | 90", "768 | 2 | 88 | 74", "1536 | 1 | 44 | 74"
    _zero3("narayanan-175b-zero3-384gpu", _GPT_175B, 384, 4, 144),
    _zero3("narayanan-175b-zero3-768gpu", _GPT_175B, 768, 2, 88),
    _zero3("narayanan-175b-zero3-1536gpu", _GPT_175B, 1536, 1, 44),
    # ZeRO-3: "529.6 | 1 | 2560* | 640 | 4 | 138 | 169", "2240 | 1120 | 2 | 98 | 137",
    #   "2240 | 1 | 48 | 140" (batch 2240 on 1120 and 2240 GPUs)
    _zero3("narayanan-530b-zero3-640gpu", _GPT_530B, 640, 4, 138),
    _zero3("narayanan-530b-zero3-1120gpu", _GPT_530B, 1120, 2, 98),
    _zero3("narayanan-530b-zero3-2240gpu", _GPT_530B, 2240, 1, 48),
)
# fmt: on
