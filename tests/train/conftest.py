"""Fixtures the checkpoint tests share: one prepared corpus and one 6-step run per session,
which each test copies before resuming (test_checkpoint_contents, test_checkpoint_consistency)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def data(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    from trainbudget.data.prepare import prepare

    path = tmp_path_factory.mktemp("corpus") / "data"
    prepare(None, path, tokenizer="byte")
    return path


@pytest.fixture(scope="session")
def six_steps(tmp_path_factory, data) -> Path:
    """A 6-step run with checkpoints at steps 3 and 6; each test resumes a copy."""
    from trainrun import CHECKPOINT_RUN, ok, train_cli

    out = tmp_path_factory.mktemp("six") / "run"
    ok(train_cli(out, data, *CHECKPOINT_RUN, "--steps", "6"))
    return out
