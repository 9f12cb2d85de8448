"""How sure a plan's figures are, printed: the range and the assumption that moves the answer
the most, as lines under `estimate` and `plan`. The blocks themselves are built in
api/answers/sensitivity.py, which the API and the planner page share."""

from __future__ import annotations

import argparse

from trainbudget.api.inputs.assumed import ASSUMED


def leave_unstated(p: argparse.ArgumentParser) -> None:
    """Parse the options of ASSUMED as None when not given (take_assumptions fills them)."""
    p.set_defaults(**dict.fromkeys(ASSUMED))


def range_line(rng: dict) -> str:
    from trainbudget.uncertainty import HIGH_PERCENTILE, LOW_PERCENTILE

    s = rng["step_seconds_range"]
    return (
        f"range        {s['low']:.3g}-{s['high']:.3g} s per step ({LOW_PERCENTILE:g}th-"
        f"{HIGH_PERCENTILE:g}th percentile of the "
        f"model's error on {s['runs']} similar published runs, {s['basis']})"
    )


def sensitivity_line(entries: list[dict]) -> str | None:
    """The assumption whose alternative moves time per token or memory the most."""
    if not entries:
        return None
    top = max(entries, key=lambda e: max(abs(e["time_change"]), abs(e["memory_change"])))
    return (
        f"assumption   {top['assumption']} was not given (assumed {top['assumed']}); it moves "
        f"the result the most: {top['alternative']} changes time per token by "
        f"{100 * top['time_change']:+.0f} % and memory by {100 * top['memory_change']:+.0f} %"
    )
