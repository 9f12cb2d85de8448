"""The step guard (pure Python): what counts as a spike, that NaNs and spikes never enter the
window, that judging waits for enough history, and that the state survives a checkpoint."""

from __future__ import annotations

import json
import math

import pytest

from trainbudget.train.guard import MAD_TO_SIGMA, SpikeDetector, StepGuard


def filled(losses, window=16, sigmas=6.0, min_excess=0.1) -> SpikeDetector:
    detector = SpikeDetector(window, sigmas, min_excess)
    for x in losses:
        detector.accept(x)
    return detector


def test_threshold_is_median_plus_the_larger_bound():
    # median 3.0; absolute deviations 0.1 x 8, 0 x 8 -> MAD 0.05; 6 sigmas = 6 x 1.4826 x 0.05
    losses = [2.9, 3.1] * 4 + [3.0] * 8
    d = filled(losses)
    sigma_bound = 6 * MAD_TO_SIGMA * 0.05  # 0.445
    assert d.threshold() == pytest.approx(3.0 + max(sigma_bound, 0.3))
    assert d.judge(3.44).ok and d.judge(3.46).reason == "spike"


def test_a_flat_curve_needs_the_relative_excess():
    d = filled([2.0] * 16)  # MAD 0: only the 10 % floor applies
    assert d.threshold() == pytest.approx(2.2)
    assert d.judge(2.19).ok and not d.judge(2.21).ok


def test_no_verdict_before_half_the_window():
    d = filled([3.0] * 7, window=16)
    assert d.threshold() is None and d.judge(1e9).ok
    d.accept(3.0)
    assert d.threshold() is not None  # 8 = max(8, 16 // 2)


def test_nans_never_enter_the_window_and_do_not_stall():
    guard = StepGuard(window=8, sigmas=6.0, min_excess=0.1)
    for x in [3.0, 2.9, 3.1, 3.0, 2.95, 3.05, 3.0, 3.0]:
        guard.record(x, guard.judge(x, 1.0))
    verdict = guard.judge(math.nan, 1.0)
    assert verdict.reason == "nonfinite"
    guard.record(math.nan, verdict)
    assert all(math.isfinite(x) for x in guard.spikes.losses)
    # the next ordinary losses are judged as before the NaN, and accepted
    for x in [2.9, 3.0, 2.8]:
        v = guard.judge(x, 1.0)
        assert v.ok
        guard.record(x, v)
    assert guard.skipped_nonfinite == 1 and guard.consecutive_skips == 0


def test_spikes_do_not_shift_the_window():
    guard = StepGuard(window=8, sigmas=6.0, min_excess=0.1)
    for x in [3.0] * 8:
        guard.record(x, guard.judge(x, 1.0))
    before = list(guard.spikes.losses)
    v = guard.judge(30.0, 1.0)
    assert v.reason == "spike"
    guard.record(30.0, v)
    assert list(guard.spikes.losses) == before


def test_nonfinite_gradient_norm_is_a_skip():
    guard = StepGuard(window=0, sigmas=6.0, min_excess=0.1)
    assert guard.judge(3.0, math.inf).reason == "nonfinite"
    assert guard.judge(1e9, 1.0).ok  # detection off: window 0


def test_state_round_trips_through_json_and_a_rollback_keeps_the_counters():
    guard = StepGuard(window=8, sigmas=6.0, min_excess=0.1)
    for x in [3.0, 2.0, 2.5, math.nan]:
        guard.record(x, guard.judge(x, 1.0))
    guard.rollbacks, guard.skipped_data_steps = 1, [4, 5]
    state = json.loads(json.dumps(guard.state_dict(), allow_nan=False))
    other = StepGuard(window=8, sigmas=6.0, min_excess=0.1)
    other.load_state_dict(state)
    assert other.state_dict() == guard.state_dict()
    other.rollbacks = 2
    other.load_state_dict(state, counters=False)  # a rollback: the window only
    assert other.rollbacks == 2 and list(other.spikes.losses) == [3.0, 2.0, 2.5]
