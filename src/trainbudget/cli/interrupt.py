"""Ctrl-C (SIGINT) or SIGTERM during a command that runs torch outside training (`eval`,
`sample`): one line and the shell's exit code, 128 + the signal, not a KeyboardInterrupt
traceback. The first signal stops the command; later ones are ignored while it unwinds, so a
second Ctrl-C cannot turn the stop into a traceback either. (`train` has its own handling:
train.launch.exits.)"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(KeyboardInterrupt):
    """The command was stopped by `signum`. A KeyboardInterrupt, so that no `except Exception`
    on the way holds it up."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop(signum: int, _frame) -> None:
    for s in SIGNALS:  # the stop is under way: a second signal must not interrupt it
        signal.signal(s, signal.SIG_IGN)
    raise Stopped(signum)


def run_interruptible(command: str, body: Callable[[], int]) -> int:
    """`body()`, or after SIGINT/SIGTERM one line on stderr and 128 + the signal."""
    if threading.current_thread() is not threading.main_thread():
        return body()  # handlers can only be set from the main thread
    old = {s: signal.signal(s, _stop) for s in SIGNALS}
    try:
        return body()
    except Stopped as err:
        name = signal.Signals(err.signum).name
        sys.stderr.write(f"trainbudget {command}: interrupted by {name}: stopped\n")
        sys.stderr.flush()
        return 128 + err.signum
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
