"""The issue "A trainer a newcomer can walk", its CLI points each reproduced: defaults that
disagreed between commands, wrong answers, options accepted in silence, and error wording that
stated a false rule. Every refusal is one line naming the field, the value and the rule."""

from __future__ import annotations

import pytest

from clirun import cli, cli_json, one_line_error

GPT2 = ("estimate", "--model", "gpt2")
CHEAPEST = ("plan", "--model", "llama-3-8b", "--gpus", "64", "--tokens", "1T")
RUN_64 = ("--model", "llama-2-7b", "--gpus", "64", "--gpu", "h100-sxm", "--seq-len", "4096")


def says(argv: tuple[str, ...], *parts: str) -> str:
    """The refusal of `argv`, checked to contain each of `parts` (field, value, rule)."""
    line = one_line_error(argv)
    for part in parts:
        assert part in line, (part, line)
    return line


# ---- 1. defaults that disagree ----------------------------------------------------------------


def test_mfu_assumes_the_gpu_every_other_command_does() -> None:
    argv = ("mfu", "--model", "gpt2", "--step-seconds", "1", "--sequences", "8")
    assumed = cli_json(*argv)
    h100 = cli_json(*argv, "--gpu", "h100-sxm")
    assert assumed["peak_flops_per_second"] == h100["peak_flops_per_second"]
    _, help_text, _ = cli("mfu", "--help")
    assert "default h100-sxm" in help_text


def test_fit_counts_against_the_memory_headroom_estimate_and_plan_use() -> None:
    fit = cli_json("fit", "--gpus", "8", "--gpu", "h100-sxm")
    estimate = cli_json(*GPT2)
    assert fit["memory_headroom"] is estimate["memory_headroom"] is None  # the device rule
    assert fit["device_memory_bytes"] == estimate["device_memory_bytes"]
    flat = cli_json("fit", "--gpus", "8", "--gpu", "h100-sxm", "--memory-headroom", "0.9")
    assert flat["limit_bytes_per_gpu"] == pytest.approx(0.9 * flat["device_memory_bytes"])
    whole = cli_json("fit", "--gpus", "8", "--gpu", "h100-sxm", "--memory-headroom", "1")
    # the device rule keeps the CUDA context and NCCL's buffers out of the device total (and
    # multiplies by the framework row's margin, never below 1): a lower limit than all of it
    assert whole["limit_bytes_per_gpu"] > fit["limit_bytes_per_gpu"] > flat["limit_bytes_per_gpu"]
    assert whole["max_params"] >= fit["max_params"] > flat["max_params"]


def test_fit_refuses_a_precision_the_gpu_cannot_compute_as_estimate_does() -> None:
    fit = says(("fit", "--gpus", "8", "--gpu", "a100-80gb", "--precision", "fp8"), "'fp8'")
    estimate = one_line_error((*GPT2, "--gpu", "a100-80gb", "--precision", "fp8"))
    assert fit.split("error: ")[1] == estimate.split("error: ")[1]


# ---- 2. wrong answers ---------------------------------------------------------------------------


def test_a_global_batch_alone_runs_the_planner_and_answers_as_plan_does() -> None:
    estimate = cli_json("estimate", *RUN_64, "--global-batch", "512")
    plan = cli_json("plan", *RUN_64, "--global-batch", "512")
    assert estimate["answer"]["kind"] == "planner"
    best = plan["plans"][0]
    assert estimate["plan"]["description"] == best["plan"]["description"]
    assert estimate["step_seconds"] == pytest.approx(best["step_seconds"])
    assert estimate["fits"] and best["fits"]


def test_an_option_value_of_two_dashes_is_quoted_as_given() -> None:
    says((*GPT2, "--tokens=--"), "tokens = '--'", "expected a count")


def test_a_checkpoint_write_longer_than_the_mtbf_is_refused() -> None:
    argv = (
        "reliability",
        *("--gpus", "1000", "--gpu-failure-rate-per-day", "0.0027"),
        *("--checkpoint-bytes", "40TB", "--write-bytes-per-second", "1GB/s"),
    )
    says(argv, "checkpoint_seconds = 40000.0", "must be shorter than mtbf_seconds")


def test_a_misspelt_tokenizer_is_unknown_not_a_missing_package(tmp_path) -> None:
    src = tmp_path / "small.txt"
    src.write_text("hello world\n")
    argv = ("data", "prepare", str(src), "--out", str(tmp_path / "out"), "--tokenizer", "bytes")
    line = says(argv, "tokenizer = 'bytes'", "unknown (did you mean byte?)", "bpe, byte")
    assert "pip install" not in line


def test_a_source_path_with_spaces_is_read_when_the_file_exists(tmp_path) -> None:
    src = tmp_path / "my data.txt"
    src.write_text("hello world\n")
    meta = cli_json("data", "prepare", str(src), "--out", str(tmp_path / "out"))
    assert [s["name"] for s in meta["sources"]] == ["my_data"]
    missing = str(tmp_path / "no data.txt")
    says(("data", "prepare", missing, "--out", str(tmp_path / "o")), missing, "[NAME=]PATH")


def test_a_png_dir_that_cannot_be_a_folder_is_named(tmp_path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    base = ("report", "--model", "gpt2", "--gpus", "8", "--tokens", "1B")
    out = ("--out", str(tmp_path / "r.html"))
    says((*base, *out, "--png-dir", str(a_file)), f"png_dir = '{a_file}'", "is a file")
    below = a_file / "pngs"
    says((*base, *out, "--png-dir", str(below)), f"png_dir = '{below}'", "cannot be made")


# ---- 3. silent accepts --------------------------------------------------------------------------


@pytest.mark.parametrize("tokens", ["0", "0.5"])
def test_fewer_than_one_training_token_is_refused(tokens) -> None:
    says((*GPT2, "--tokens", tokens), f"tokens = '{tokens}'", "at least 1 token")


def test_a_price_without_tokens_is_refused() -> None:
    says((*GPT2, "--price-per-gpu-hour", "2.5"), "price_per_gpu_hour = '2.5'", "--tokens")


def test_an_empty_override_is_refused() -> None:
    says((*GPT2, "--set", "name="), "name = ''", "is empty")


def test_mfu_with_a_layout_and_no_tokens_is_refused() -> None:
    """With --tokens it adds the labelled what-if time (test_one_answer pins that line)."""
    says((*GPT2, "--gpus", "8", "--tp", "2", "--mfu", "0.4"), "--mfu = '0.4'", "needs --tokens")


@pytest.mark.parametrize(
    "argv", [(*GPT2, "--max-tp", "2"), (*GPT2, "--gpus", "8", "--tp", "2", "--max-tp", "2")]
)
def test_max_tp_where_no_search_runs_is_refused(argv) -> None:
    says(argv, "--max-tp = '2'", "bounds the layout search")


@pytest.mark.parametrize(
    "option, value", [("--gpu-options", "h100-sxm,a100-80gb"), ("--prices", "2.5")]
)
def test_cheapest_cluster_options_without_a_deadline_are_refused(option, value) -> None:
    says((*CHEAPEST, option, value), f"{option} = '{value}'", "--within-days")


def test_emit_out_without_emit_is_refused(tmp_path) -> None:
    path = str(tmp_path / "x.json")
    says((*CHEAPEST, "--emit-out", path), f"--emit-out = '{path}'", "give --emit")


@pytest.mark.parametrize(
    "extra, field, value, rule",
    [
        (("--gpu-options", "h100-sxm,h100-sxm"), "gpu_options", "h100-sxm,h100-sxm", "more than"),
        (("--gpu-options", ""), "gpu_options", "", "no empty entry"),
        (("--gpu-options", "h100-sxm,a100-80g"), "gpu_options", "a100-80g", "unknown"),
        (("--gpu-counts", "64,64"), "gpu_counts", "64,64", "more than once"),
        (("--gpu-counts", "64,,128"), "gpu_counts", "64,,128", "no empty entry"),
        (("--prices", "h100-sxm=2,H100-SXM=1"), "prices", "h100-sxm=2,H100-SXM=1", "more than"),
        (("--prices", "h100-sxm=2,a100-80g=1"), "prices", "a100-80g", "unknown"),
        (("--prices", "h100-sxm=2,a100-80gb=1"), "--prices", "h100-sxm=2,a100-80gb=1", "not among"),
    ],
)
def test_repeated_empty_or_misspelt_cluster_entries_are_refused(extra, field, value, rule) -> None:
    argv = (*CHEAPEST, "--within-days", "30", "--prices", "2", *extra)
    says(argv, f"{field} = '{value}'", rule)


def test_validate_takes_one_output_form() -> None:
    says(("validate", "--markdown", "--json"), "--json", "--markdown", "not allowed")


@pytest.mark.parametrize(
    "argv, option",
    [
        (("--op", "dot", "--n", "8", "--b", "5"), "--b"),
        (("--op", "matmul", "--b", "2", "--d", "3", "--f", "4", "--n", "5"), "--n"),
    ],
)
def test_intensity_refuses_a_size_its_op_does_not_take(argv, option) -> None:
    says(("intensity", *argv), f"{option} = '5'", "is not a size of --op")


@pytest.mark.parametrize(
    "extra, field, value, rule",
    [
        (("--text-field", "body"), "text_field", "body", ".jsonl sources only"),
        (("--seed", "-1"), "seed", "-1", "integer >= 0"),
    ],
)
def test_data_prepare_refuses_options_that_would_do_nothing(
    tmp_path, extra, field, value, rule
) -> None:
    src = tmp_path / "small.txt"
    src.write_text("hello world\n")
    argv = ("data", "prepare", str(src), "--out", str(tmp_path / "out"), *extra)
    says(argv, f"{field} = '{value}'", rule)


def test_data_prepare_refuses_an_empty_out(tmp_path) -> None:
    src = tmp_path / "small.txt"
    src.write_text("hello world\n")
    says(("data", "prepare", str(src), "--out", ""), "out = ''", "must name a folder")


# ---- 4. wording ---------------------------------------------------------------------------------


def test_a_vpp_without_the_interleaved_schedule_is_worded_truthfully() -> None:
    argv = (*GPT2, "--gpus", "8", "--pp", "2", "--vpp", "2", "--schedule", "1f1b")
    line = says(argv, "vpp (2) needs schedule 'interleaved', not '1f1b'")
    assert "> 1 goes with" not in line


def test_zero_shard_with_zero_0_names_the_zero_stage() -> None:
    line = says((*GPT2, "--gpus", "8", "--zero-shard", "2", "--zero", "0"), "needs zero > 0")
    assert "must divide" not in line


def test_a_weight_that_is_not_a_number_is_named(tmp_path) -> None:
    src = tmp_path / "small.txt"
    src.write_text("hello world\n")
    argv = ("data", "prepare", f"{src}:abc", "--out", str(tmp_path / "out"))
    says(argv, "weight = 'abc'", "must be a number > 0")


def test_a_cp_plan_refused_by_deepspeed_suggests_no_cp() -> None:
    argv = (
        *("plan", "--model", "llama-3-8b", "--gpus", "8", "--seq-len", "131072"),
        *("--global-batch", "8", "--emit", "deepspeed"),
    )
    says(argv, "cp = ", "cannot be emitted for deepspeed", "--no-cp")
