"""FlashAttention's 8 x A100 GPT-3 table (published/flash_attention.py): per-GPU throughput from
the node's, the README's own 'Hours / 1B tokens' column, and the configs' batch arithmetic."""

from __future__ import annotations

import pytest

from trainbudget.published import PUBLISHED_RUNS
from trainbudget.published.flash_attention import FLASH_ATTENTION, N_GPUS

# training/README.md GPT3 table: model, batch size (tokens), throughput (tokens/sec), hours/1B
README_ROWS = {
    "flashattn-gpt3-125m-8gpu": (0.5e6, 1310e3, 0.21),
    "flashattn-gpt3-355m-8gpu": (0.5e6, 503e3, 0.55),
    "flashattn-gpt3-760m-8gpu": (0.5e6, 245e3, 1.13),
    "flashattn-gpt3-1.3b-8gpu": (1e6, 169e3, 1.64),
    "flashattn-gpt3-2.7b-8gpu": (1e6, 85e3, 3.27),
}
# the configs' `datamodule.batch_size` at gpu_mem 82 (an 80GB A100): pile/gpt3{s,m,l,xl}-flash,
# gpt3-2.7B-flash-hdim128
MICRO_AT_80GB = {
    "flashattn-gpt3-125m-8gpu": 32,  # "8 if <24 else (16 if <40 else 32)"
    "flashattn-gpt3-355m-8gpu": 32,  # "4 if <24 else (8 if <40 else (16 if <80 else 32))"
    "flashattn-gpt3-760m-8gpu": 16,  # "2 if <24 else (4 if <40 else (8 if <80 else 16))"
    "flashattn-gpt3-1.3b-8gpu": 8,  # "1 if <24 else (2 if <40 else (4 if <80 else 8))"
    "flashattn-gpt3-2.7b-8gpu": 4,  # "1 if <40 else (2 if <80 else 4)"
}


def test_every_row_of_the_readme_table_is_a_registered_run() -> None:
    ids = [r.id for r in PUBLISHED_RUNS]
    assert {r.id for r in FLASH_ATTENTION} == set(README_ROWS)
    assert all(ids.count(r.id) == 1 for r in FLASH_ATTENTION)
    assert all("Training speed" in r.source for r in FLASH_ATTENTION)


@pytest.mark.parametrize("run", FLASH_ATTENTION, ids=lambda r: r.id)
def test_per_gpu_throughput_is_the_node_figure_over_8(run) -> None:
    _, node_tokens_per_second, hours_per_billion = README_ROWS[run.id]
    assert run.n_gpus == N_GPUS == 8
    assert run.measured.tokens_per_second_per_gpu == pytest.approx(node_tokens_per_second / 8)
    # the README's last column, printed to 2 decimals, follows from its throughput
    assert 1e9 / node_tokens_per_second / 3600 == pytest.approx(hours_per_billion, abs=0.005)


@pytest.mark.parametrize("run", FLASH_ATTENTION, ids=lambda r: r.id)
def test_batch_is_the_readme_tokens_and_the_config_micro_batch(run) -> None:
    batch_tokens, _, _ = README_ROWS[run.id]
    tokens = run.layout.global_batch * run.seq_len
    assert tokens == pytest.approx(batch_tokens, rel=0.05)  # 256 x 2048 = "0.5M", 512 x 2048 = "1M"
    assert run.layout.micro_batch == MICRO_AT_80GB[run.id]
    assert run.layout.global_batch % (run.layout.micro_batch * run.layout.dp) == 0


def test_gpt3_2_7b_uses_head_dim_128() -> None:
    """README: "For the GPT3-2.7B model, we set head dimension to 128 (instead of 80)"."""
    (run,) = [r for r in FLASH_ATTENTION if r.id == "flashattn-gpt3-2.7b-8gpu"]
    assert (run.model.d_model, run.model.n_heads, run.model.d_head) == (2560, 20, 128)


def test_no_row_repeats_a_flashattention2_measurement_and_both_are_one_source() -> None:
    """FlashAttention-2 (arXiv:2307.08691) Table 1 measures the FlashAttention-2 kernel; this
    README table (January 2023) predates it, and its 2.7B has 20 heads where the paper's has
    32. Same authors and training code: one source_key for leave-one-source-out."""
    fa2 = [r for r in PUBLISHED_RUNS if r.id.startswith("flashattn2-")]
    assert fa2
    shapes = {(r.model.n_layers, r.model.d_model, r.model.n_heads, r.seq_len) for r in fa2}
    same_shape = [
        r.id
        for r in FLASH_ATTENTION
        if (r.model.n_layers, r.model.d_model, r.model.n_heads, r.seq_len) in shapes
    ]
    # only the 1.3B at 2k shares a shape: a different kernel, 169k tokens/s on the node here
    # against FlashAttention-2's 196 TFLOP/s (about 172k tokens/s)
    assert same_shape == ["flashattn-gpt3-1.3b-8gpu"]
    assert "88173a1" in FLASH_ATTENTION[0].source
    assert {r.source_key for r in (*FLASH_ATTENTION, *fa2)} == {"dao-flashattention"}


def test_rows_run_the_first_flashattention_kernel() -> None:
    """The table is of commit 88173a1 (2023-01-17), before flash-attn 2.0 (July 2023): the
    first FlashAttention kernel, which validation times at its own A100 share ('flash1')."""
    from trainbudget.validation import framework_row

    for run in FLASH_ATTENTION:
        assert run.attention_kernel == "flash1"
        assert framework_row(run.framework, run.attention_kernel).attention_kernel == "flash1"
    assert framework_row("other").attention_kernel == "flash2"  # the GENERIC row's
