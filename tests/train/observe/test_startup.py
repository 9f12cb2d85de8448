"""train.observe.startup: which steps get a terminal line, which a metrics record, and the start-up
messages' form."""

from __future__ import annotations

import io

from trainbudget.train.observe.startup import Say, log_rule, logged_step, on_terminal


def shown(steps: int, log_interval: int, first: int = 0) -> list[int]:
    return [
        s
        for s in range(first + 1, steps + 1)
        if on_terminal(s, first=first, log_interval=log_interval, steps=steps)
    ]


def test_the_terminal_shows_doubling_steps_then_every_log_interval():
    assert shown(25, 10) == [1, 2, 4, 8, 10, 20, 25]
    assert shown(3, 1) == [1, 2, 3]
    assert shown(100, 50) == [1, 2, 4, 8, 16, 32, 50, 100]


def test_a_resumed_run_shows_its_own_first_steps():
    assert shown(130, 10, first=100) == [101, 102, 104, 108, 110, 120, 130]


def test_metrics_keep_the_log_interval_rule():
    logged = [s for s in range(1, 26) if logged_step(s, log_interval=10, steps=25)]
    assert logged == [10, 20, 25]
    # every logged step is on the terminal too
    assert set(logged) <= set(shown(25, 10))


def test_the_rule_in_words():
    assert log_rule(10) == "lines at steps 1, 2, 4, 8, then every 10 steps and the last"
    assert log_rule(2) == "lines at steps 1, then every 2 steps and the last"
    assert log_rule(1) == "a line per step"


def test_say_names_the_command_and_the_seconds_and_is_quiet_off_the_main_process():
    stream = io.StringIO()
    Say(enabled=True, command="profile", stream=stream)("timing")
    assert stream.getvalue().startswith("trainbudget profile: timing [t = ")
    assert stream.getvalue().endswith(" s]\n")
    quiet = io.StringIO()
    Say(enabled=False, stream=quiet)("building the model")
    assert quiet.getvalue() == ""
