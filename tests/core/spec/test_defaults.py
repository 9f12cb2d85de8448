"""The defaults every command shares (core.spec.defaults), each with its source."""

from __future__ import annotations

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.defaults import (
    DEFAULT_TOKENS_PER_BATCH,
    default_global_batch,
    default_seq_len,
)
from trainbudget.core.spec.presets import get_preset


@pytest.mark.parametrize(
    ("seq_len", "sequences"),
    [
        (2048, 2048),  # Llama 1: 4M tokens = 2,048 x 2,048 (arXiv:2302.13971, Table 2)
        (4096, 1024),  # Llama 2: 4M tokens = 1,024 x 4,096 (arXiv:2307.09288, Table 1)
        (8192, 512),  # the README's 70B report: --global-batch 512 at 8,192
        (3000, 1024),  # 1,398 sequences would be 4M; the nearest power of two is 1,024
        (2**23, 1),  # a sequence longer than the batch: still one sequence
    ],
)
def test_default_global_batch_is_about_4m_tokens(seq_len: int, sequences: int) -> None:
    assert DEFAULT_TOKENS_PER_BATCH == 4 * 2**20
    assert default_global_batch(seq_len).value == sequences


def test_default_global_batch_needs_a_sequence_length() -> None:
    with pytest.raises(SpecError):
        default_global_batch(0)


@pytest.mark.parametrize(
    ("preset", "seq_len"),
    [
        ("llama-3-405b", 8192),  # pre-trained at 8K, context 128K (arXiv:2407.21783, 3.4)
        ("deepseek-v3", 4096),  # pre-trained at 4K (arXiv:2412.19437, 4.2)
        ("llama-3-8b", 8192),  # no extension: its context length
        ("gpt2", 1024),
    ],
)
def test_default_seq_len_is_the_pretraining_length(preset: str, seq_len: int) -> None:
    chosen = default_seq_len(get_preset(preset))
    assert chosen.value == seq_len
    assert "--seq-len" in chosen.source
