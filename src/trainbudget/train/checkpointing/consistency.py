"""A checkpoint's step counter and its per-rank files, checked before a resume trusts them
(issue 24, part 4). The manifest proves that the files are the ones written, and contents.py
that their tensors are this run's; neither catches two faults that got through:

- an edited step counter: state.json's "step", the folder renamed to match and the manifest
  rehashed, was resumed from the forged step. Two counters the edit leaves behind disagree with
  it: the batch stream's position (`data_step`, the loader's step) and the optimizer's own
  step count (AdamW's per-parameter 'step'). Both are tied to the step by what the loop does:
  each step draws one global batch and, unless it is skipped, updates once;
- a rank-NNNNN.pt that torch.load(weights_only=True) refuses (a pickle that would run code) or
  that does not hold RNG states passed every check, and the resume then failed as a whole
  instead of falling back to an older checkpoint as for a checksum mismatch.

Both raise CheckpointError naming the file, so that `resume.find_checkpoint` rejects that
checkpoint in one line and takes the newest one that passes.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from trainbudget.train.checkpointing.checkpoint import load_file
from trainbudget.train.checkpointing.manifest import DCP_DIR, CheckpointError
from trainbudget.train.checkpointing.sharded import read_optimizer_steps
from trainbudget.train.rng import capture_rng_state, restore_rng_state

RANK_FILE = re.compile(r"rank-\d{5}\.pt")
RNG_PARTS = ("python", "numpy", "torch")
"""What `rng.restore_rng_state` restores on every machine (CUDA's only where there is one)."""


def check_step(path: Path, state: dict, optimizer_steps: int | None) -> None:
    """state.json's step (`state`, of checkpoint `path`) against the batch stream's position
    and, when known, the optimizer's own step count (`optimizer_steps`).

    The loop's invariants: every step draws one global batch, and a rollback moves the stream
    past the batches it drops, so step <= data_step <= step + the batches rollbacks dropped;
    every step updates once unless skipped -- a non-finite step, a rollback with no checkpoint
    to go back to, or (fp16 loss scaling, the scaler's state not empty) an overflow that
    GradScaler skips uncounted -- so step - skips <= optimizer steps <= step. The guard's
    counters cover this run's whole history (a rollback keeps them), so the lower bound is
    loose after a rollback, never wrong."""
    file = path / "state.json"
    step, data_step = state["step"], state.get("data_step")
    loader, guard = state.get("loader"), state.get("guard")
    if type(data_step) is not int or not isinstance(loader, dict) or not isinstance(guard, dict):
        raise CheckpointError(file, "lacks the batch stream's position or the guard's counters")
    if loader.get("step") != data_step:
        raise CheckpointError(
            file, f"says data_step {data_step} but loader step {loader.get('step')!r}"
        )
    dropped = _count(file, guard, "skipped_data_steps")
    if not step <= data_step <= step + dropped:
        raise CheckpointError(
            file,
            f"says step {step}, but the batch stream is at step {data_step} ({dropped} batches "
            "dropped by rollbacks): an edited step counter",
        )
    if optimizer_steps is None:  # an optimizer that keeps no count (SGD), or no state yet
        return
    skipped = _count(file, guard, "skipped_nonfinite") + _count(file, guard, "rollbacks")
    lowest = 0 if state.get("scaler") else step - skipped
    if not lowest <= optimizer_steps <= step:
        allowed = f"{lowest} to {step}" if lowest < step else f"{step}"
        raise CheckpointError(
            file,
            f"says step {step}, but the optimizer has taken {optimizer_steps} steps (its own "
            f"'step' count; {allowed} with {skipped} updates skipped): an edited step counter",
        )


def _count(file: Path, guard: dict, key: str) -> int:
    value = guard.get(key)
    if isinstance(value, list):
        value = len(value)
    if type(value) is not int or value < 0:
        raise CheckpointError(file, f"guard {key} is {value!r}, not a count")
    return value


def optimizer_steps(path: Path, state: dict) -> int | None:
    """The optimizer's own step count in checkpoint `path`: the largest 'step' of its
    per-parameter state (a parameter without a gradient at some step counts fewer), or None
    when it keeps none. optimizer.pt is memory-mapped (only the scalars are read); a dcp/
    checkpoint's scalars are read by DCP in this process alone (no collective)."""
    if state.get("format", "full") == "dcp":
        saved = read_optimizer_steps(path / DCP_DIR)
    else:
        saved = load_file(path, "optimizer.pt", map_location="cpu", mmap=True)
    counts = list(_step_values(saved))
    return max(counts) if counts else None


def _step_values(tree: object):
    """Every 'step' entry of an optimizer's state dict (nested: a mixed-precision optimizer's
    inner one too), as an int."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key == "step" and _is_count(value):
                yield int(value)
            else:
                yield from _step_values(value)
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            yield from _step_values(value)


def _is_count(value: object) -> bool:
    if isinstance(value, torch.Tensor):
        return value.numel() == 1
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_rank_files(path: Path) -> None:
    """Every rank-NNNNN.pt of checkpoint `path` loads with torch.load(weights_only=True) and
    holds RNG states that `rng.restore_rng_state` accepts: tried on this process's generators,
    which are put back as they were (CUDA's, if saved, checked as tensors only)."""
    for file in sorted(p for p in Path(path).iterdir() if RANK_FILE.fullmatch(p.name)):
        saved = load_file(path, file.name)
        rng = saved.get("rng") if isinstance(saved, dict) else None
        if not isinstance(rng, dict) or not all(part in rng for part in RNG_PARTS):
            raise CheckpointError(file, f"holds no RNG states ({', '.join(RNG_PARTS)})")
        cuda = rng.get("cuda", [])
        if not isinstance(cuda, list) or not all(isinstance(t, torch.Tensor) for t in cuda):
            raise CheckpointError(file, "holds CUDA RNG states that are not a list of tensors")
        mine = capture_rng_state()
        try:
            restore_rng_state({part: rng[part] for part in RNG_PARTS})
        except Exception as err:  # random.setstate, numpy and torch each raise their own
            raise CheckpointError(
                file, f"holds RNG states that cannot be restored ({_first_line(err)})"
            ) from None
        finally:
            restore_rng_state(mine)


def _first_line(err: Exception) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__
