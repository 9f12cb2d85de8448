"""cli.interrupt: Ctrl-C or SIGTERM in `eval` and `sample` ends with one line and 128 + the
signal, however many times it is pressed (it used to be a KeyboardInterrupt traceback)."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import time

import pytest

from trainbudget.cli.interrupt import run_interruptible


def _signalled(signum: int, times: int):
    """A command body that receives `signum` `times` times while it works."""

    def body() -> int:
        for _ in range(times):
            os.kill(os.getpid(), signum)
        time.sleep(5)  # the first signal ends the sleep; the test would notice a hang
        return 0

    return body


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.parametrize("times", [1, 2])
def test_a_signal_is_one_line_and_the_shells_exit_code(signum, code, times) -> None:
    before = signal.getsignal(signum)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert run_interruptible("eval", _signalled(signum, times)) == code
    name = signal.Signals(signum).name
    assert err.getvalue() == f"trainbudget eval: interrupted by {name}: stopped\n"
    assert signal.getsignal(signum) == before  # the handlers are put back


def test_without_a_signal_the_body_answers() -> None:
    assert run_interruptible("sample", lambda: 0) == 0
