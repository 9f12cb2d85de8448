"""train.spec.metrics_scan: where a metrics.jsonl stops being whole records. The reader and the
resume built on it are tested in test_run_files.py and test_metrics.py."""

from __future__ import annotations

from trainbudget.train.spec.metrics_scan import scan_metrics


def test_a_last_line_without_its_newline_is_torn_even_where_it_parses() -> None:
    # '{"step": 2, "loss": 2.15}' cut after "2" is still JSON, with a wrong loss
    scan = scan_metrics('{"step": 1, "loss": 2.5}\n{"step": 2, "loss": 2}', "m.jsonl")
    assert [n for n, _, _ in scan.records] == [1]
    assert scan.rest == ('{"step": 2, "loss": 2}',)
    assert scan.damage is not None and scan.damage.field == "m.jsonl:2"
    assert "cut short" in scan.damage.rule


def test_blank_lines_are_skipped_and_only_the_damaged_lines_are_rest() -> None:
    # a garbage line in the middle costs that line, not the records logged after it
    text = '{"step": 1}\n\n{"step": -1}\n{"step": 3}\nnot json\n{"step": 4}\n'
    scan = scan_metrics(text, "m.jsonl")
    assert [n for n, _, _ in scan.records] == [1, 4, 6]
    assert scan.rest == ('{"step": -1}', "not json")
    assert scan.damage.field == "m.jsonl:3: step"


def test_a_whole_file_has_no_damage() -> None:
    scan = scan_metrics('{"step": 1}\n{"step": 2, "event": "checkpoint"}\n\n', "m.jsonl")
    assert [r["step"] for _, _, r in scan.records] == [1, 2]
    assert scan.rest == () and scan.damage is None
    assert scan_metrics("", "m.jsonl").records == ()
