"""Meta's Llama rows (published/llama_reports.py): the figures recomputed from the reports' raw
numbers, the architectures' dimensions, and the layout rule every row assumes."""

from __future__ import annotations

import math
import re

import pytest

from trainbudget.published import PUBLISHED_RUNS, get_run
from trainbudget.published.llama_reports import LLAMA1, LLAMA2, LLAMA3_CARD

ROWS = (*LLAMA1, *LLAMA2, *LLAMA3_CARD)


def test_rows_are_registered_once_with_a_cited_table_or_section() -> None:
    ids = [r.id for r in PUBLISHED_RUNS]
    for run in ROWS:
        assert ids.count(run.id) == 1
        assert re.search(r"Table|table|§|[Ss]ection", run.source), run.id


def test_llama1_65b_is_the_stated_throughput_and_matches_table_15() -> None:
    """Llama 1 §2.4: "around 380 tokens/sec/GPU on 2048 A100 GPU with 80GB of RAM ... 1.4T
    tokens takes approximately 21 days"; Table 15: 1,022,362 GPU-hours for 65B."""
    run = get_run("llama1-65b-2048gpu")
    assert run.measured.tokens_per_second_per_gpu == 380
    assert run.n_gpus == 2048 and "n_gpus" not in run.assumed
    from_table_15 = 1.4e12 / (1_022_362 * 3600)
    assert from_table_15 == pytest.approx(380, rel=0.002)
    days = 1.4e12 / (380 * 2048 * 86400)
    assert days == pytest.approx(21, rel=0.01)  # "approximately 21 days"


@pytest.mark.parametrize(
    ("run_id", "tokens", "gpu_hours"),
    [
        ("llama1-7b-gpuhours", 1.0e12, 82_432),  # Llama 1 Table 2 (1.0T) and Table 15
        ("llama1-13b-gpuhours", 1.0e12, 135_168),
        ("llama1-33b-gpuhours", 1.4e12, 530_432),
        ("llama2-7b-gpuhours", 2.0e12, 184_320),  # Llama 2 Table 1 (2.0T); model card table
        ("llama2-13b-gpuhours", 2.0e12, 368_640),
        ("llama2-70b-gpuhours", 2.0e12, 1_720_320),
        ("llama3-8b-gpuhours", 15e12, 1.3e6),  # Llama 3 card: "over 15 trillion", "1.3M"
        ("llama3-70b-gpuhours", 15e12, 6.4e6),
    ],
)
def test_throughput_is_tokens_over_gpu_seconds(run_id: str, tokens: float, gpu_hours: float):
    assert get_run(run_id).measured.tokens_per_second_per_gpu == pytest.approx(
        tokens / (gpu_hours * 3600)
    )


def test_llama2_34b_hours_are_the_card_total_minus_its_rows() -> None:
    """Llama 2 model card: Total 3311616 = 7B 184320 + 13B 368640 + 70B 1720320 + the
    unlisted 34B, which is 1,038,336 (paper Table 2)."""
    hours_34b = 3_311_616 - (184_320 + 368_640 + 1_720_320)
    assert hours_34b == 1_038_336
    run = get_run("llama2-34b-gpuhours")
    assert run.measured.tokens_per_second_per_gpu == pytest.approx(2.0e12 / (hours_34b * 3600))


@pytest.mark.parametrize(
    ("run_id", "d_model", "n_heads", "n_layers"),
    [  # Llama 1 Table 2: dimension, n heads, n layers
        ("llama1-7b-gpuhours", 4096, 32, 32),
        ("llama1-13b-gpuhours", 5120, 40, 40),
        ("llama1-33b-gpuhours", 6656, 52, 60),
        ("llama1-65b-2048gpu", 8192, 64, 80),
    ],
)
def test_llama1_dims_and_the_ffn_width_rule(run_id, d_model, n_heads, n_layers) -> None:
    """The Llama 1 reference code: hidden = int(2 * 4d / 3) rounded up to a multiple of 256."""
    model = get_run(run_id).model
    assert (model.d_model, model.n_heads, model.n_layers) == (d_model, n_heads, n_layers)
    assert model.d_ff == 256 * math.ceil(int(2 * 4 * d_model / 3) / 256)
    assert (model.vocab_size, model.max_seq_len, model.n_kv_heads) == (32000, 2048, n_heads)


def test_llama2_34b_is_code_llama_34b_shape() -> None:
    """codellama/CodeLlama-34b-hf config.json: hidden 8192, 48 layers, 64 heads, 8 KV heads,
    intermediate 22016, vocab 32000."""
    m = get_run("llama2-34b-gpuhours").model
    assert (m.d_model, m.n_layers, m.n_heads, m.n_kv_heads, m.d_ff, m.vocab_size) == (
        8192, 48, 64, 8, 22016, 32000,
    )  # fmt: skip
    assert {"model.d_model", "model.n_kv_heads"} <= get_run("llama2-34b-gpuhours").assumed


@pytest.mark.parametrize("run", ROWS, ids=lambda r: r.id)
def test_batches_are_the_reports_4m_or_16m_tokens(run) -> None:
    """Llama 1 Table 2 and Llama 2 Table 1: 4M tokens per batch; Llama 3 8B/70B: 16M assumed."""
    tokens = run.layout.global_batch * run.seq_len
    expected = 16 * 2**20 if run in LLAMA3_CARD else 4 * 2**20
    assert tokens == expected
    assert ("layout.global_batch" in run.assumed) == (run in LLAMA3_CARD)


@pytest.mark.parametrize("run", ROWS, ids=lambda r: r.id)
def test_every_layout_field_is_marked_assumed(run) -> None:
    """No Meta source states a layout: every layout field the step time reads is assumed."""
    for name in ("layout.tp", "layout.pp", "layout.dp", "layout.zero", "layout.micro_batch"):
        assert name in run.assumed, (run.id, name)
    assert "Layout NOT published" in run.notes
