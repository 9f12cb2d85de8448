"""Where a run's numbers go: one JSON object per logged step in metrics.jsonl, TensorBoard when
the `tensorboard` package is installed, and a progress line on the terminal (a bar with ETA when
stderr is interactive, plain lines otherwise). `train.spec.run_files` reads the file back.

metrics.jsonl is append-only and heals:
- each record is one `os.write` of a whole newline-terminated line to a file opened O_APPEND
  (a short write is continued), so a crash leaves at most one torn line, at the end; a write
  that fails (a full disk) cuts the file back to its last complete record and stops the run;
- the file is fsynced after each checkpoint's record, so the records up to a checkpoint are on
  disk once the checkpoint is;
- a resumed run first cuts a damaged end (a torn last line) back to the last complete record
  and moves the records logged after the checkpoint it resumes from to
  metrics.after-step-NNNNNNNN.jsonl, so the file holds one history (`resume_metrics`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from trainbudget.train.spec.metrics_scan import scan_metrics
from trainbudget.train.spec.run_files import METRICS_ASIDE_PREFIX, METRICS_FILE, TENSORBOARD_DIR

if TYPE_CHECKING:
    from trainbudget.train.launch.faults import Faults


class MetricsWriteError(RuntimeError):
    """A record could not be written (a full disk, say); the message says what was left."""


class MetricsWriter:
    def __init__(
        self,
        run_dir: Path,
        *,
        tensorboard: bool = True,
        enabled: bool = True,
        append: bool = False,
        faults: Faults | None = None,
    ) -> None:
        self.enabled = enabled
        self._fd: int | None = None
        self._tb = None
        self._faults = faults
        if not enabled:
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / METRICS_FILE
        # a resumed run continues its file (healed first: resume_metrics); a fresh one starts it
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if append else os.O_TRUNC)
        self._fd = os.open(self.path, flags, 0o644)
        self._size_bytes = os.fstat(self._fd).st_size
        """The file's length after its last complete record."""
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(run_dir / TENSORBOARD_DIR))
            except ImportError:  # the tensorboard package is optional
                self._tb = None

    @property
    def tensorboard(self) -> bool:
        return self._tb is not None

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        clean = {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in record.items()
        }
        self._append(record["step"], (json.dumps(clean, allow_nan=False) + "\n").encode())
        if record.get("event") == "checkpoint":
            os.fsync(self._fd)
        if self._tb is not None:
            self._scalars(record)

    def _append(self, step: int, line: bytes) -> None:
        try:
            if self._faults is not None:
                self._faults.metrics_write(step, self._fd, line)
            rest = memoryview(line)
            while rest:  # one write; a short one (the disk filling up) is continued
                rest = rest[os.write(self._fd, rest) :]
        except OSError as err:
            raise MetricsWriteError(self._cut_back(step, err)) from None
        self._size_bytes += len(line)

    def _cut_back(self, step: int, err: OSError) -> str:
        """Cut a partly written record off; the message for the failed write."""
        what = f"{self.path}: the record of step {step} could not be written ({err.strerror})"
        try:
            os.ftruncate(self._fd, self._size_bytes)
        except OSError:
            return f"{what}; its torn line stays until --resume cuts it"
        return f"{what}; the file was cut back to its last complete record"

    def _scalars(self, record: dict) -> None:
        step = record["step"]
        for tag, value in tensorboard_scalars(record).items():
            self._tb.add_scalar(tag, value, step)

    def close(self) -> None:
        if self._fd is not None:
            # a failed sync at the end loses no record a checkpoint depends on
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        if self._tb is not None:
            self._tb.close()


TENSORBOARD_TAGS = {
    "train_loss_by_source": "train_loss",
    "eval/per_source": "val_loss",
}
"""Tags of the per-source losses in TensorBoard: train_loss/<source> and val_loss/<source>,
side by side in one section each; any other nested number keeps its path (eval/val_loss)."""


def tensorboard_scalars(record: dict) -> dict[str, float]:
    """{tag: number} for TensorBoard: every number of a record, nested objects as key/sub/...
    (renamed by TENSORBOARD_TAGS); not the step, flags or strings."""
    out: dict[str, float] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                path = f"{prefix}/{key}" if prefix else str(key)
                walk(TENSORBOARD_TAGS.get(path, path), sub)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[prefix] = value

    walk("", {k: v for k, v in record.items() if k != "step"})
    return out


def resume_metrics(run_dir: Path, step: int) -> list[str]:
    """Before a resumed run appends to metrics.jsonl: set its damaged lines aside (a torn last
    line, a line that is not a record; the whole records around them stay), and move
    the records logged after `step`, the checkpoint resumed from, aside, so that the run's
    records stay one history. What was removed goes to metrics.after-step-NNNNNNNN.jsonl as it
    was; the file is replaced atomically. Returns what was done, one line each."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return []
    scan = scan_metrics(path.read_bytes().decode("utf-8", "surrogateescape"), path)
    kept = [line for _, line, record in scan.records if record["step"] <= step]
    later = [line for _, line, record in scan.records if record["step"] > step]
    if not later and scan.damage is None:
        return []
    aside = _aside_path(run_dir, step)
    _write_lines(aside, [*later, *scan.rest])
    tmp = path.with_name(path.name + ".tmp")
    _write_lines(tmp, kept)
    os.replace(tmp, path)
    _fsync_dir(run_dir)
    done = []
    if scan.damage is not None:
        n = len(scan.rest)
        done.append(
            f"{scan.damage.field} {scan.damage.rule}: set aside {n} unreadable "
            f"line{'s' if n > 1 else ''} in {aside.name}; every whole record is kept"
        )
    if later:
        done.append(
            f"{path.name}: {len(later)} records logged after step {step} (the checkpoint "
            f"resumed from) moved to {aside.name}"
        )
    return done


def _aside_path(run_dir: Path, step: int) -> Path:
    """metrics.after-step-NNNNNNNN.jsonl, or with .2, .3, ... where that exists already."""
    stem = f"{METRICS_ASIDE_PREFIX}{step:08d}"
    path, n = run_dir / f"{stem}.jsonl", 1
    while path.exists():
        n += 1
        path = run_dir / f"{stem}.{n}.jsonl"
    return path


def _write_lines(path: Path, lines: list[str]) -> None:
    with open(path, "wb") as f:
        f.write("".join(line + "\n" for line in lines).encode("utf-8", "surrogateescape"))
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Progress:
    """`[####......] step 120/300  loss 2.31  ETA 1m05s` redrawn in place on a terminal;
    a plain line per call otherwise (CI logs, files)."""

    def __init__(
        self, total: int, *, enabled: bool = True, stream=None, first_step: int = 0
    ) -> None:
        self.total, self.enabled, self.first_step = total, enabled, first_step
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.interactive = enabled and self.stream.isatty()

    def update(self, step: int, text: str) -> None:
        if not self.enabled:
            return
        done = step / self.total
        elapsed = time.perf_counter() - self.start
        # a resumed run: the rate is that of the steps this process ran
        ran = (step - self.first_step) / self.total
        eta = elapsed / ran * (1 - done) if ran > 0 else 0.0
        line = f"step {step}/{self.total}  {text}  ETA {int(eta // 60)}m{int(eta % 60):02d}s"
        if self.interactive:
            width = 20
            bar = "#" * int(done * width) + "." * (width - int(done * width))
            self.stream.write(f"\r[{bar}] {line}\x1b[K")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.interactive:
            self.stream.write("\n")
