"""`trainbudget validate --runs FILE`: your own measured runs, each stated as `estimate`
options, predicted as `estimate` predicts them; bad rows are one-line errors naming the row."""

from __future__ import annotations

import json
import shlex

import pytest

from clirun import cli, cli_json, one_line_error
from published_cli import estimate_args
from trainbudget.core.parallel.fits import ALLOCATOR_FRAGMENTATION
from trainbudget.published import get_run
from trainbudget.validation import compare

GPT2 = "--model gpt2 --gpus 8 --gpu a100-80gb --dp 8 --micro-batch 16 --global-batch 128"
LLAMA = "--model llama-3-8b --gpus 8 --gpu h100-sxm --dp 8 --zero 3 --global-batch 16"


def write(tmp_path, rows, name="runs.json"):
    path = tmp_path / name
    path.write_text(json.dumps(rows), encoding="utf-8")
    return str(path)


def test_each_run_is_predicted_as_estimate_predicts_it(tmp_path):
    """The prediction is `estimate --json`'s for the row's options; a tokens/s figure becomes a
    step time through the step's own tokens (global batch x sequence)."""
    rows = [
        {"id": "gpt2", "estimate": GPT2, "step_seconds": 0.1},
        {"id": "llama", "estimate": LLAMA, "tokens_per_second_per_gpu": 6000},
    ]
    doc = cli_json("validate", "--runs", write(tmp_path, rows))
    gpt2, llama = doc["runs"]
    for run, options in ((gpt2, GPT2), (llama, LLAMA)):
        est = cli_json("estimate", *shlex.split(options))
        assert run["predicted_step_seconds"] == est["step_seconds"]
        assert run["layout"] == est["plan"]["description"]
        assert run["predicted_memory_bytes"] == est["memory_bytes"]["total"]
    tokens = cli_json("estimate", *shlex.split(LLAMA))["tokens_per_step"]
    assert llama["measured_step_seconds"] == pytest.approx(tokens / (6000 * 8))
    assert gpt2["error"] == pytest.approx(gpt2["predicted_step_seconds"] / 0.1 - 1)
    errors = [gpt2["error"], llama["error"]]
    assert doc["mean_absolute_error"] == pytest.approx(sum(map(abs, errors)) / 2)
    assert doc["mean_error"] == pytest.approx(sum(errors) / 2)


def test_tokens_per_second_over_all_gpus_is_the_same_step(tmp_path):
    tokens = cli_json("estimate", *shlex.split(GPT2))["tokens_per_step"]
    rows = [
        {"id": "per-gpu", "estimate": GPT2, "tokens_per_second_per_gpu": tokens / 0.2 / 8},
        {"id": "all", "estimate": GPT2, "tokens_per_second": tokens / 0.2},
    ]
    doc = cli_json("validate", "--runs", write(tmp_path, rows))
    assert [r["measured_step_seconds"] for r in doc["runs"]] == pytest.approx([0.2, 0.2])


def test_memory_is_compared_in_the_measure_given(tmp_path):
    """A reserved figure (torch.cuda.max_memory_reserved) is set against the allocated peak
    plus the caching allocator's share (core.parallel.fits.in_measure)."""
    rows = [{"id": "m", "estimate": LLAMA, "step_seconds": 2, "memory": "60GB",
             "memory_measure": "reserved"}]  # fmt: skip
    (run,) = cli_json("validate", "--runs", write(tmp_path, rows))["runs"]
    reserved = run["predicted_memory_bytes"] / (1 - ALLOCATOR_FRAGMENTATION)
    assert run["predicted_memory_bytes_in_measure"] == pytest.approx(reserved)
    assert run["memory_error"] == pytest.approx(reserved / 60e9 - 1)


def test_a_csv_file_gives_the_json_files_answer(tmp_path):
    rows = [{"id": "gpt2", "estimate": GPT2, "step_seconds": 0.1, "completed": False}]
    csv_path = tmp_path / "runs.csv"
    csv_path.write_text(f'id,estimate,step_seconds,completed\ngpt2,"{GPT2}",0.1,false\n')
    from_csv = cli_json("validate", "--runs", str(csv_path))
    assert from_csv == cli_json("validate", "--runs", write(tmp_path, rows))
    # a run that did not complete is not counted among those that should fit
    assert (from_csv["completed_runs"], from_csv["predicted_not_to_fit"]) == (0, [])


def test_the_text_names_each_run_and_sums_up(tmp_path):
    rows = [{"id": "gpt2-ddp", "estimate": GPT2, "step_seconds": 0.1}]
    code, out, err = cli("validate", "--runs", write(tmp_path, rows))
    assert code == 0 and err == ""
    assert out.splitlines()[1].startswith("gpt2-ddp")
    assert "step-time mean absolute error over 1 run: " in out
    assert "completed runs predicted to fit: 1 of 1" in out


# Narayanan et al. 2021 (Table 1 row), NeMo 24.07 (FP8, H100), the FlashAttention-2 paper and
# KempnerForge (H200, DTensor TP): four sources, four stacks
PUBLISHED = ("narayanan-18b-256gpu", "nemo2407-llama3-8b-8gpu", "flashattn2-gpt3-1.3b-2k",
             "kforge-7b-tp2-2gpu")  # fmt: skip


def test_published_runs_stated_in_a_file_get_validates_errors(tmp_path):
    """The reviewer's protocol as a command: a published run written as a row (its estimate
    options and its measured step) gets the error `validate` reports for it."""
    rows = [
        {"id": rid, "estimate": shlex.join(estimate_args(get_run(rid), json=False)),
         "step_seconds": compare(get_run(rid)).measured_seconds}
        for rid in PUBLISHED
    ]  # fmt: skip
    doc = cli_json("validate", "--runs", write(tmp_path, rows))
    for run in doc["runs"]:
        assert run["error"] == pytest.approx(compare(get_run(run["id"])).error, rel=1e-9)


@pytest.mark.parametrize(
    ("rows", "says"),
    [
        ([], "holds no runs"),
        ([{"id": "a", "estimate": GPT2, "step_seconds": 1, "colour": "red"}],
         "runs[a].colour = 'red': unknown field; known: id, estimate"),
        ([{"id": "a", "estimate": GPT2, "step_seconds": 1}] * 2,
         "runs.id = 'a': appears twice"),
        ([{"estimate": GPT2, "step_seconds": 1}], "runs[0].id: must be a non-empty name"),
        ([{"id": "a", "estimate": GPT2 + " --bogus 3", "step_seconds": 1}],
         "runs[a].estimate: unrecognized arguments: --bogus 3"),
        ([{"id": "a", "estimate": "--model gpt2 --gpus 8", "step_seconds": 1}],
         "runs[a].estimate = '--model gpt2 --gpus 8': states no layout"),
        ([{"id": "a", "estimate": GPT2.replace("gpt2", "gpt9"), "step_seconds": 1}],
         "runs[a].model = 'gpt9': unknown (did you mean gpt2?)"),
        ([{"id": "a", "estimate": GPT2}], "runs[a].measured: give exactly one of step_seconds"),
        ([{"id": "a", "estimate": GPT2, "step_seconds": 1, "memory": "10GB"}],
         "runs[a].memory_measure: must say what the memory figure measures"),
        ([{"id": "a", "estimate": GPT2, "step_seconds": -1}],
         "runs[a].step_seconds = -1: must be a positive number"),
        ([{"id": "a", "estimate": GPT2 + " --json", "step_seconds": 1}],
         "runs[a].estimate = '--json': is not allowed here"),
        ([{"id": "a", "estimate": GPT2.replace("--dp 8", "--dp 4"), "step_seconds": 1}],
         "runs[a].plan = "),
        ([{"id": "a", "estimate": GPT2, "step_seconds": 1, "completed": "maybe"}],
         "runs[a].completed = 'maybe': must be true or false"),
    ],
)  # fmt: skip
def test_a_bad_row_is_one_line_naming_it(tmp_path, rows, says):
    assert says in one_line_error(("validate", "--runs", write(tmp_path, rows)))


def test_a_file_that_is_not_runs_is_one_line(tmp_path):
    missing = str(tmp_path / "none.json")
    assert one_line_error(("validate", "--runs", missing)).endswith(": no such file")
    prose = tmp_path / "notes.txt"
    prose.write_text("some notes\n")
    assert "is neither JSON nor CSV whose header names id and estimate" in one_line_error(
        ("validate", "--runs", str(prose))
    )
    broken = tmp_path / "broken.json"
    broken.write_text('[{"id": ')
    assert "is not JSON" in one_line_error(("validate", "--runs", str(broken)))


def test_the_examples_rows_are_published_runs_with_validates_errors():
    """examples/measured_runs.json (the README's example) writes four published runs by hand,
    in the fewest options; each row's step and memory errors are `validate`'s for that run."""
    from pathlib import Path

    example = Path(__file__).resolve().parents[3] / "examples" / "measured_runs.json"
    doc = cli_json("validate", "--runs", str(example))
    assert len(doc["runs"]) == 4
    for run in doc["runs"]:
        published = compare(get_run(run["id"]))
        assert run["source"]
        assert run["error"] == pytest.approx(published.error, rel=1e-9)
        if run["memory_error"] is not None:
            assert run["memory_error"] == pytest.approx(published.memory_error, rel=1e-9)
