"""Published large-scale LLM training runs, as typed records, for validating the step-time model.

Each run is a `PublishedRun` (record.py): the model (a preset where one exists, otherwise every
field spelled out, position and norm always stated), the hardware, the layout and batch, the
measured figure in the source's units with its FLOP convention, the source's table, figure or
section, the fields that had to be assumed, and notes on every check and assumption. Records
are validated when this package is imported. One module per family of sources:

- megatron.py: Korthikanti et al. 2022, MT-NLG (Smith et al. 2022), Narayanan et al. 2021
- nemo.py: Nemotron-4 15B and 340B, NVIDIA dgxc-benchmarking
- open_models.py: BLOOM, Llama 3 405B, torchtitan, MosaicML MPT
- flash_attention.py: FlashAttention's GPT-3 training table on 8 x A100 80GB
- llama_reports.py: Llama 1 (§2.4, Table 15), Llama 2 and Llama 3 model cards (GPU-hours)
- open_community.py: TinyLlama, Pythia-1B, StarCoderBase
"""

from __future__ import annotations

from trainbudget.core.errors import unknown_key
from trainbudget.published.flash_attention import FLASH_ATTENTION
from trainbudget.published.llama_reports import LLAMA1, LLAMA2, LLAMA3_CARD
from trainbudget.published.megatron import KORTHIKANTI, MTNLG, NARAYANAN
from trainbudget.published.nemo import DGXC, NEMOTRON4
from trainbudget.published.open_community import COMMUNITY
from trainbudget.published.open_models import BLOOM, LLAMA3, MPT, TORCHTITAN
from trainbudget.published.record import (
    FLOP_CONVENTIONS,
    Layout,
    Measurement,
    PublishedRun,
    RunDataError,
    unique_ids,
)

PUBLISHED_RUNS: tuple[PublishedRun, ...] = unique_ids(
    (*KORTHIKANTI, *MTNLG, *NARAYANAN, *BLOOM, *NEMOTRON4, *LLAMA3, *DGXC, *TORCHTITAN, *MPT,
     *FLASH_ATTENTION, *LLAMA1, *LLAMA2, *LLAMA3_CARD, *COMMUNITY)
)  # fmt: skip
"""Every run, in the order `trainbudget validate` prints them."""


def get_run(run_id: str) -> PublishedRun:
    """The run called `run_id`; an unknown id is a SpecError listing the known ones."""
    for run in PUBLISHED_RUNS:
        if run.id == run_id:
            return run
    raise unknown_key("run", run_id, [r.id for r in PUBLISHED_RUNS])


__all__ = [
    "FLOP_CONVENTIONS",
    "PUBLISHED_RUNS",
    "Layout",
    "Measurement",
    "PublishedRun",
    "RunDataError",
    "get_run",
]
