"""What the terminal shows before and between logged steps, so that a run is never silent for
long: a line as each start-up phase begins (with the seconds since the run started), and the
rule for which steps get a progress line.

The rule (`on_terminal`): steps 1, 2, 4, 8, ... below log_interval (counted from where this
process started: a resumed run shows its own first steps), then every log_interval steps and
the last. The doubling steps go to the terminal only; metrics.jsonl holds the
log_interval steps (`logged_step`), which are the ones measured and evaluated. Step 1's time
includes the warm-up (allocation, compilation). No torch."""

from __future__ import annotations

import sys
import time


class Say:
    """`trainbudget train: <text> [t = 2.3 s]` on stderr (the seconds since it was made), from
    the main process only; `profile` says its phases the same way."""

    def __init__(self, *, enabled: bool = True, command: str = "train", stream=None) -> None:
        self.enabled, self.command = enabled, command
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()

    def __call__(self, text: str) -> None:
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.start
        self.stream.write(f"trainbudget {self.command}: {text} [t = {elapsed:.1f} s]\n")
        self.stream.flush()


def logged_step(step: int, *, log_interval: int, steps: int) -> bool:
    """Whether the 1-based `step` is measured and written to metrics.jsonl."""
    return step % log_interval == 0 or step == steps


def on_terminal(step: int, *, first: int = 0, log_interval: int, steps: int) -> bool:
    """Whether the 1-based `step` gets a progress line: the logged steps, and this process's
    1st, 2nd, 4th, 8th, ... step (`first`: the step it started from) while fewer than
    log_interval."""
    ran = step - first
    early = 0 < ran < log_interval and ran & (ran - 1) == 0
    return early or logged_step(step, log_interval=log_interval, steps=steps)


def log_rule(log_interval: int) -> str:
    """The rule in words, for the line that opens the training."""
    if log_interval == 1:
        return "a line per step"
    early = [str(2**k) for k in range(log_interval.bit_length()) if 2**k < log_interval]
    return f"lines at steps {', '.join(early)}, then every {log_interval} steps and the last"
