"""Where a run's numbers go: one JSON object per logged step in metrics.jsonl (flushed each
line, so a crash loses nothing logged), TensorBoard when the `tensorboard` package is
installed, and a progress line on the terminal (a bar with ETA when stderr is interactive,
plain lines otherwise). `train.run_files` reads the file back."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

from trainbudget.train.run_files import METRICS_FILE


class MetricsWriter:
    def __init__(
        self, run_dir: Path, *, tensorboard: bool = True, enabled: bool = True, append: bool = False
    ) -> None:
        self.enabled = enabled
        self._file = None
        self._tb = None
        if not enabled:
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        # a resumed run continues its file; a fresh run into the same directory starts a new one
        mode = "a" if append else "w"
        self._file = open(run_dir / METRICS_FILE, mode, encoding="utf-8")  # noqa: SIM115
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
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
        self._file.write(json.dumps(clean, allow_nan=False) + "\n")
        self._file.flush()
        if self._tb is not None:
            step = record["step"]
            for key, value in record.items():
                if (
                    key != "step"
                    and isinstance(value, (int, float))
                    and not isinstance(value, bool)
                ):
                    self._tb.add_scalar(key, value, step)
                elif isinstance(value, dict):
                    for sub, v in value.items():
                        if isinstance(v, (int, float)) and not isinstance(v, bool):
                            self._tb.add_scalar(f"{key}/{sub}", v, step)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._tb is not None:
            self._tb.close()


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
