"""TinyLlama, Pythia-1B and StarCoderBase (published/open_community.py): stated layouts and the
throughputs recomputed from the sources' raw figures."""

from __future__ import annotations

import pytest

from trainbudget.published import PUBLISHED_RUNS, get_run
from trainbudget.published.open_community import COMMUNITY, PYTHIA_TOKENS


def test_rows_are_registered_once_with_a_cited_section_or_table() -> None:
    ids = [r.id for r in PUBLISHED_RUNS]
    for run in COMMUNITY:
        assert ids.count(run.id) == 1
        assert "table" in run.source.lower() or "§" in run.source or "section" in run.source


def test_tinyllama_stated_throughput_matches_its_gpu_hours() -> None:
    """README: "24k tokens per second per A100-40G GPU"; table: 3456 A100 GPU hours per 300B
    tokens; batch "2 million tokens (2048 * 1024)"; "per-gpu batch size of 16k tokens"."""
    run = get_run("tinyllama-1.1b-16gpu")
    assert run.measured.tokens_per_second_per_gpu == 24000
    from_gpu_hours = 300e9 / (3456 * 3600)
    assert from_gpu_hours == pytest.approx(24000, rel=0.005)
    assert (run.layout.global_batch, run.seq_len, run.n_gpus) == (1024, 2048, 16)
    assert run.layout.micro_batch * run.seq_len == 16384
    assert (run.model.n_layers, run.model.n_heads, run.model.n_kv_heads) == (22, 32, 4)
    assert (run.model.d_model, run.model.d_ff) == (2048, 5632)


def test_pythia_1b_throughput_from_gpu_hours_and_config_batch() -> None:
    """TinyLlama README (quoting the Pythia paper): Pythia-1.0B 4830 A100 GPU-hours;
    pythia README: 299,892,736,000 tokens; pythia-1b.yml: 64 GPUs, micro 16, gas 1."""
    run = get_run("pythia-1b-64gpu")
    assert PYTHIA_TOKENS == 299_892_736_000
    assert run.measured.tokens_per_second_per_gpu == pytest.approx(PYTHIA_TOKENS / (4830 * 3600))
    assert run.layout.micro_batch * run.layout.dp * 1 == run.layout.global_batch == 1024
    assert (run.model.n_layers, run.model.d_model, run.model.n_heads) == (16, 2048, 8)


def test_starcoder_layout_is_the_papers_and_throughput_from_gpu_hours() -> None:
    """StarCoder §5: 512 A100 80GB, TP 4, PP 4, 32-fold DP, micro 1, 16 accumulation steps,
    global batch 512 (4M tokens); 1T tokens over 320,256 GPU-hours."""
    run = get_run("starcoderbase-15b-512gpu")
    lay = run.layout
    assert (lay.tp, lay.pp, lay.dp, lay.micro_batch, lay.grad_accum) == (4, 4, 32, 1, 16)
    assert lay.global_batch * run.seq_len == 4 * 2**20
    assert run.measured.tokens_per_second_per_gpu == pytest.approx(1e12 / (320_256 * 3600))
    assert (run.model.n_kv_heads, run.model.d_ff, run.model.vocab_size) == (1, 24576, 49152)
