"""Fixtures the trainer's tests share: one prepared corpus per session; one 6-step run, which
each checkpoint test copies before resuming (test_checkpoint_contents,
test_checkpoint_consistency); the observe tests' runs, one per layout (test_comm_count,
test_rank_memory)."""

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
    from trainrun import CHECKPOINT_RUN, ok, train_run

    out = tmp_path_factory.mktemp("six") / "run"
    ok(train_run(out, data, *CHECKPOINT_RUN, "--steps", "6"))  # in this process
    return out


@pytest.fixture(scope="session")
def observed_run(tmp_path_factory, data):
    """`observed_run(name)`: the folder of trainrun.OBSERVED_LAYOUTS[name]'s run, made on first
    request and kept for the session, so the comm-count and rank-memory tests read one run."""
    from trainrun import OBSERVED_LAYOUTS, OBSERVED_RUN, ok, train_run

    root = tmp_path_factory.mktemp("observed")
    done: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in done:
            nproc, args = OBSERVED_LAYOUTS[name]
            ok(train_run(root / name, data, *OBSERVED_RUN, *args, nproc=nproc))
            done[name] = root / name
        return done[name]

    return get
