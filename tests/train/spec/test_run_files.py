"""train.spec.run_files: a run directory's files read once, for the run report and `plot`. No torch:
the runs are synthetic (tests/synthetic_runs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synthetic_runs import PREDICTED_STEP_SECONDS, TOKENS_PER_STEP, record, write_run
from trainbudget.core.errors import SpecError
from trainbudget.train.spec.run_files import read_run, read_runs


def test_the_last_record_of_a_step_wins(synthetic_run: Path) -> None:
    r = read_run(synthetic_run)
    assert [p.step for p in r.points] == list(range(2, 31, 2))  # one point per step, sorted
    by_step = {p.step: p for p in r.points}
    assert by_step[20].loss == pytest.approx(record(20)["loss"])
    assert by_step[22].loss == pytest.approx(record(22, loss_scale=0.95)["loss"])
    assert r.replaced_records == 5
    assert any("last record wins" in n for n in r.notes)


def test_events_are_markers_not_points(synthetic_run: Path) -> None:
    r = read_run(synthetic_run)
    assert [(e.step, e.event) for e in r.events] == [(16, "rollback"), (20, "checkpoint")]
    assert "skipped_batches=[15, 16]" in r.events[0].detail
    # the rollback's spike loss (99) is not a point of the loss curve
    assert all(p.loss is not None and p.loss < 10 for p in r.points)


def test_fields_and_predictions(synthetic_run: Path) -> None:
    r = read_run(synthetic_run)
    p = r.points[-1]
    assert r.tokens_per_step == TOKENS_PER_STEP
    assert p.predicted_tokens_per_second == pytest.approx(TOKENS_PER_STEP / PREDICTED_STEP_SECONDS)
    # MFU scales with tokens/s: the predicted step time's MFU
    assert p.predicted_mfu == pytest.approx(0.3 * p.step_seconds / PREDICTED_STEP_SECONDS)
    assert p.phases_seconds == {
        "data": 0.001,
        "forward": 0.04,
        "backward": 0.08,
        "optimizer": 0.004,
    }
    assert p.val_loss_by_source.keys() == {"docs", "code"}
    s = r.summary
    assert s is not None and s.step_seconds_error == 0.25
    # no CUDA figure: the fake-tensor measurement stands in, and says so
    assert s.memory_measured_peak_bytes == 88_231_640
    assert s.memory_measured_by == "torch MemTracker on fake tensors"
    assert s.predicted_tokens_per_second == pytest.approx(TOKENS_PER_STEP / 0.1)
    assert s.reliability == {"rollbacks": 1, "checkpoints_written": 1}
    assert r.config == {"model": "gpt2", "steps": 30}


def test_a_running_run_has_no_summary(tmp_path: Path) -> None:
    run = write_run(tmp_path / "running", summary=False, config=False)
    r = read_run(run)
    assert r.summary is None and r.config == {}
    assert any("still going" in n for n in r.notes)
    # tokens per step from a record: tokens/s x step seconds
    assert r.tokens_per_step == TOKENS_PER_STEP


@pytest.fixture
def synthetic_run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "synthetic")


def _write(run: Path, rows: list[dict]) -> Path:
    run.mkdir()
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    return run


def test_nulls_and_unknown_keys_read_as_missing(tmp_path: Path) -> None:
    run = _write(
        tmp_path / "odd",
        [
            {"step": 1, "loss": None, "mfu": None, "eval": {}, "x": {}, "probes": [1]},
            {"step": 2, "loss": 2.0, "phases_seconds": {"data": None}, "memory_bytes": {}},
            {"step": 3, "event": {"nested": "object"}},
        ],
    )
    (run / "summary.json").write_text("[not an object]")
    r = read_run(run / "metrics.jsonl")  # the file itself works too
    assert [(p.step, p.loss, p.tokens_per_second) for p in r.points] == [
        (1, None, None),
        (2, 2.0, None),
    ]
    assert r.points[1].phases_seconds == {}
    assert r.summary is None  # a half-written summary.json: the run is still going
    assert r.events[0].event == "{'nested': 'object'}"


ONE_BAD_VALUE = {  # key of the bad value: (record, the value the error names)
    "loss": ({"loss": "high"}, "high"),
    "tokens_per_second": ({"tokens_per_second": True}, True),
    "memory_bytes": ({"memory_bytes": [1, 2]}, [1, 2]),
    "eval": ({"eval": "n/a"}, "n/a"),
    "phases_seconds: data": ({"phases_seconds": {"data": "fast"}}, "fast"),
    "eval: per_source": ({"eval": {"val_loss": 2.1, "per_source": 3}}, 3),
}


@pytest.mark.parametrize("field", sorted(ONE_BAD_VALUE))
def test_a_known_value_of_the_wrong_type_names_line_key_and_value(
    tmp_path: Path, field: str
) -> None:
    fields, value = ONE_BAD_VALUE[field]
    run = _write(tmp_path / "bad", [{"step": 0, "loss": 3.0}, {"step": 1, "loss": 2.0, **fields}])
    with pytest.raises(SpecError) as err:
        read_run(run)
    assert err.value.field.endswith(f"metrics.jsonl:2: {field}")
    assert err.value.value == value


def test_a_logged_step_without_a_loss_is_an_error(tmp_path: Path) -> None:
    run = _write(tmp_path / "bad", [{"step": 1, "loss": 2.0}, {"step": 2}])
    with pytest.raises(SpecError, match="every logged step has a loss") as err:
        read_run(run)
    assert err.value.field.endswith("metrics.jsonl:2: loss")


def test_runs_that_share_a_folder_name_are_named_by_their_path(tmp_path: Path) -> None:
    a, b = write_run(tmp_path / "a" / "run"), write_run(tmp_path / "b" / "run")
    assert [r.name for r in read_runs([a, b])] == [str(a), str(b)]
    assert [r.name for r in read_runs([a, tmp_path / "b" / "run" / "metrics.jsonl"])] == [
        str(a),
        str(tmp_path / "b" / "run" / "metrics.jsonl"),
    ]
    assert read_runs([a])[0].name == "run"


@pytest.mark.parametrize(
    "content, field",
    [
        ("{not json\n", "metrics.jsonl:1"),
        ('{"loss": 1}\n', "step"),
        ("", "metrics"),
        ('{"step": 1, "loss": 2.0}', "metrics.jsonl:1"),  # cut short: no record to read
    ],
)
def test_bad_metrics_name_the_line(tmp_path: Path, content: str, field: str) -> None:
    run = tmp_path / "bad"
    run.mkdir()
    (run / "metrics.jsonl").write_text(content)
    with pytest.raises(SpecError) as err:
        read_run(run)
    assert field in err.value.field


def test_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not a run directory"):
        read_run(tmp_path)


def test_a_torn_last_line_is_skipped_and_named(tmp_path: Path) -> None:
    # the failure: a run stopped inside a write (a full disk, kill -9) left half a line, and
    # plot and report refused the whole run
    run = _write(tmp_path / "torn", [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.5}])
    text = (run / "metrics.jsonl").read_text().rstrip("\n") + '\n{"step": 3, "loss": 2.'
    (run / "metrics.jsonl").write_text(text)
    r = read_run(run)
    assert [p.step for p in r.points] == [1, 2]
    assert r.skipped is not None and "metrics.jsonl:3" in r.skipped
    assert "is cut short" in r.skipped and "skipped 1 line, read the 2 records" in r.skipped
    assert r.skipped in r.notes


def test_the_records_around_a_damaged_line_are_read(tmp_path: Path) -> None:
    # the failure: after a resume appended onto a torn line ('...2.{"step": 21, ...'), the
    # whole run was refused; now the damaged line is skipped and named, the rest read
    run = _write(tmp_path / "mixed", [{"step": s, "loss": 3.0 - s / 10} for s in (1, 2, 3)])
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[1] = lines[1][:-3] + lines[2]  # line 2 cut short, the next record glued onto it
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    r = read_run(run)
    assert [p.step for p in r.points] == [1, 3]
    assert "metrics.jsonl:2 = " in r.skipped and "is not JSON" in r.skipped
    assert "skipped 1 line, read the 2 records around it" in r.skipped
    assert read_run(synthetic_run_path(tmp_path)).skipped is None


def synthetic_run_path(tmp_path: Path) -> Path:
    return write_run(tmp_path / "whole")
