"""Published large-scale LLM training runs, as typed records, for validating the step-time model.

Each run is a `PublishedRun` (record.py): the model (a preset where one exists, otherwise every
field spelled out, position and norm always stated), the hardware, the layout and batch, the
measured figure in the source's units with its FLOP convention, the source's table, figure or
section, the fields that had to be assumed, and notes on every check and assumption. Records
are validated when this package is imported. One module per family of sources:

- megatron.py: Korthikanti et al. 2022, MT-NLG (Smith et al. 2022)
- narayanan.py: Narayanan et al. 2021, every row of Tables 1 and 2 (PTD-P and ZeRO-3)
- nemo.py: Nemotron-4 15B and 340B, NVIDIA dgxc-benchmarking
- open_models.py: BLOOM, Llama 3 405B
- sharded_dp.py: the PyTorch FSDP paper, OPT-175B, BloombergGPT
- systems_papers.py: Zero Bubble Pipeline Parallelism (1F1B baseline), FlashAttention-2
- flash_attention.py: the flash-attention repository's GPT-3 training table on 8 x A100 80GB
  (FlashAttention-1 era; one source with FlashAttention-2's rows)
- llama_reports.py: Llama 1 (§2.4, Table 15), Llama 2 and Llama 3 model cards (GPU-hours)
- open_community.py: TinyLlama, Pythia-1B, StarCoderBase
- nvidia/: NVIDIA's NeMo performance pages in FP8, one module each: nemo_perf.py (the NeMo
  24.07 pre-training table on DGX H100, and the NeMo FLOP count and layout helper the pages
  share), nemo_long_context.py (the NeMo long-sequence table, context parallel, 4K-1024K, H100
  and B200) and megatron_bridge.py (the Megatron-Bridge performance summary, NeMo 25.11-26.06,
  Llama 3 8B-70B and 3.1 405B)
- automodel.py: NVIDIA NeMo AutoModel's FSDP2 pre-training benchmark (Llama 3.1 70B, H100)
- nanotron.py: Hugging Face nanotron's scaling sweep (the Ultra-Scale Playbook): best
  configuration, MFU and peak memory of four Llama-style models on 1-64 nodes of 8 H100
- speedrun.py: the modded-nanogpt speedrun records on 8 x H100 (llm.c GPT-2 124M baseline,
  124M with AdamW under DDP + torch.compile, the 1.5B scale-up)
- runs/: the runs added for issue 23's item 6, one module per source (runs/__init__.py lists
  them): InternLM, nanochat, Bekman's ML Engineering book, llm.c, Accelerate's FSDP2 example,
  BAAI FlagPerf, XTuner's speed benchmark, KempnerForge's MFU benchmark

Excluded sources: the Megatron-LM repository (README tables, CI golden values), torchtitan's
docs and benchmarks (and torchao's float8 tables), MosaicML llm-foundry's benchmark tables, IBM
fms-fsdp's README (and the blog posts republishing it), MLPerf Training results, NVIDIA
JAX-Toolbox READMEs, torchtune's README, OLMo-core's README, Colossal-AI's README and examples,
and the Hugging Face blog's FSDP-vs-DeepSpeed post. A reviewer's held-out runs are drawn from
them, so no record may take a number from them (tests/published/test_published_runs.py and
test_modern_runs.py check every `source`; nvidia/nemo_perf.py leaves out the NeMo 24.07 row whose
TFLOP/s links to MLPerf).
"""

from __future__ import annotations

from trainbudget.core.errors import unknown_key
from trainbudget.published.automodel import AUTOMODEL
from trainbudget.published.flash_attention import FLASH_ATTENTION
from trainbudget.published.llama_reports import LLAMA1, LLAMA2, LLAMA3_CARD
from trainbudget.published.megatron import KORTHIKANTI, MTNLG
from trainbudget.published.nanotron import NANOTRON
from trainbudget.published.narayanan import NARAYANAN
from trainbudget.published.nemo import DGXC, NEMOTRON4
from trainbudget.published.nvidia.megatron_bridge import BRIDGE_PERF
from trainbudget.published.nvidia.nemo_long_context import NEMO_LONG_CONTEXT
from trainbudget.published.nvidia.nemo_perf import NEMO_PERF_2407
from trainbudget.published.open_community import COMMUNITY
from trainbudget.published.open_models import BLOOM, LLAMA3
from trainbudget.published.record import (
    FLOP_CONVENTIONS,
    FRAMEWORKS,
    Layout,
    Measurement,
    PublishedRun,
    RunDataError,
    unique_ids,
)
from trainbudget.published.runs.accelerate_fp8 import ACCELERATE_FP8
from trainbudget.published.runs.flagperf import FLAGPERF
from trainbudget.published.runs.internlm import INTERNLM
from trainbudget.published.runs.kempnerforge import KEMPNERFORGE
from trainbudget.published.runs.llmc import LLMC
from trainbudget.published.runs.mlengineering import MLENGINEERING
from trainbudget.published.runs.nanochat import NANOCHAT
from trainbudget.published.runs.xtuner import XTUNER
from trainbudget.published.sharded_dp import BLOOMBERG, FSDP_PAPER, OPT
from trainbudget.published.speedrun import SPEEDRUN
from trainbudget.published.systems_papers import FLASH_ATTN2, ZERO_BUBBLE

PUBLISHED_RUNS: tuple[PublishedRun, ...] = unique_ids(
    (
        *KORTHIKANTI,
        *MTNLG,
        *NARAYANAN,
        *BLOOM,
        *NEMOTRON4,
        *LLAMA3,
        *DGXC,
        *FSDP_PAPER,
        *OPT,
        *BLOOMBERG,
        *ZERO_BUBBLE,
        *FLASH_ATTN2,
        *FLASH_ATTENTION,
        *LLAMA1,
        *LLAMA2,
        *LLAMA3_CARD,
        *COMMUNITY,
        *NEMO_PERF_2407,
        *NEMO_LONG_CONTEXT,
        *BRIDGE_PERF,
        *AUTOMODEL,
        *NANOTRON,
        *SPEEDRUN,
        *INTERNLM,
        *NANOCHAT,
        *MLENGINEERING,
        *LLMC,
        *ACCELERATE_FP8,
        *FLAGPERF,
        *XTUNER,
        *KEMPNERFORGE,
    )
)
"""Every run, in the order `trainbudget validate` prints them."""


def get_run(run_id: str) -> PublishedRun:
    """The run called `run_id`; an unknown id is a SpecError listing the known ones."""
    for run in PUBLISHED_RUNS:
        if run.id == run_id:
            return run
    raise unknown_key("run", run_id, [r.id for r in PUBLISHED_RUNS])


__all__ = [
    "FLOP_CONVENTIONS",
    "FRAMEWORKS",
    "PUBLISHED_RUNS",
    "Layout",
    "Measurement",
    "PublishedRun",
    "RunDataError",
    "get_run",
]
