"""The entry point's import budget (issue 13: `estimate --json` in 0.15 s): a command imports
its own module and what it uses, no other command's, and numpy only where the planner's grid
runs. Checked on `sys.modules` in a fresh interpreter, run as the program is (sys.argv, no argv
given): deterministic, where a timed assertion would not be (benchmarks/bench_cli.py times it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainbudget.cli import main as entry

SRC = str(Path(__file__).resolve().parents[2] / "src")
README_1 = "estimate --model llama-3-70b --tokens 15T --gpus 1024 --gpu h100-sxm --seq-len 8192"
# never needed to answer an estimate: the trainer, the report, config emitters, the profiler,
# the torch model, data preparation, the published-run tables and their validation (the error
# range is read from loso_errors.json, its keys from validation_keys), torch, matplotlib, and
# difflib (imported by an error's suggestions only)
NOT_FOR_ESTIMATE = {
    "trainbudget.validation",
    "trainbudget.train",
    "trainbudget.report",
    "trainbudget.emit",
    "trainbudget.profile",
    "trainbudget.model",
    "trainbudget.data",
    "trainbudget.published",
    "torch",
    "matplotlib",
    "difflib",
}


def _run_as_program(argv: str) -> tuple[str, set[str]]:
    """(OPENBLAS_NUM_THREADS as the command left it, the modules loaded) after `trainbudget
    ARGV` in a fresh interpreter, whose environment does not set OPENBLAS_NUM_THREADS. The
    command must run without the garbage collector and leave its objects frozen for the
    interpreter's teardown."""
    code = (
        "import contextlib, gc, io, os, sys\n"
        f"sys.argv = ['trainbudget', *{argv.split()!r}]\n"
        "from trainbudget.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main() == 0\n"
        "assert gc.get_freeze_count() > 0 and not gc.isenabled()\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS'))\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "PYTHONPATH": SRC},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    return out[0], set(out[1].split())


def _other_commands(name: str) -> set[str]:
    return {module for command, (module, _) in entry.COMMANDS.items() if command != name}


def test_estimate_json_in_planner_mode_imports_no_other_command_and_nothing_heavy():
    blas_threads, loaded = _run_as_program(README_1 + " --json")
    assert "trainbudget.cli.plan.estimate_cmd" in loaded
    assert not loaded & _other_commands("estimate")
    assert not loaded & NOT_FOR_ESTIMATE
    assert "numpy" in loaded  # the planner's grid: one array element per layout
    assert blas_threads == "1"  # numpy's OpenBLAS loaded without its spinning threads


@pytest.mark.parametrize(
    "argv",
    [
        "estimate --model llama-2-7b --tokens 2T --json",  # one GPU: no search
        "estimate --model dense:70e9 --tokens 15e12 --gpus 1024 --gpu h100-sxm --mfu 0.5",
        "estimate --model llama-3-8b --gpus 16 --tp 2 --pp 2 --global-batch 64 --json",
    ],
    ids=["one-gpu", "mfu", "layout"],
)
def test_estimate_without_a_search_imports_no_numpy(argv):
    _, loaded = _run_as_program(argv)
    assert "numpy" not in loaded
    assert not loaded & (_other_commands("estimate") | NOT_FOR_ESTIMATE)


def test_a_catalog_command_imports_no_estimator():
    _, loaded = _run_as_program("models")
    assert not loaded & _other_commands("models") - {"trainbudget.cli.tools.catalog_cmd"}
    assert not {m for m in loaded if m.startswith("trainbudget.core.parallel")}
    assert "numpy" not in loaded


def test_the_one_gpu_estimate_imports_no_plan_model():
    """One GPU and no layout: neither the search nor the one-plan evaluation (nor the step-time
    and per-GPU memory models under them) is loaded, nor `decimal` (a bare count, 15e12)."""
    _, loaded = _run_as_program("estimate --model llama-3-8b --tokens 15e12 --json")
    plan_models = (
        "search.planner",
        "search.planner_fast",
        "timing.step_time",
        "timing.compute_time",
        "timing.layer_time",
        "timing.comm_time",
        "memory.gpu_memory",
        "memory.gpu_peak",
    )
    parallel = Path(SRC) / "trainbudget" / "core" / "parallel"
    assert all((parallel / f"{m.replace('.', '/')}.py").exists() for m in plan_models)  # real
    assert not loaded & {f"trainbudget.core.parallel.{m}" for m in plan_models}
    assert "decimal" not in loaded


def test_only_the_commands_that_search_the_grid_set_how_malloc_keeps_memory():
    """_keep_freed_memory loads ctypes (numpy loads it too) for estimate, plan and report; not
    for an estimate on one GPU (no --gpus: nothing to search)."""
    _, loaded = _run_as_program("models")
    assert "ctypes" not in loaded
    _, loaded = _run_as_program("estimate --model llama-3-8b --tokens 15e12 --json")
    assert "ctypes" not in loaded
    _, loaded = _run_as_program("estimate --model llama-3-8b --tokens 15e12 --gpus=1 --json")
    assert "ctypes" in loaded
    assert entry.GRID_COMMANDS.issubset(entry.COMMANDS)
    assert not entry.GRID_COMMANDS & entry.TORCH_COMMANDS  # torch's allocators are its own


def test_the_parser_for_one_command_holds_that_command_alone():
    only = entry.build_parser("estimate")
    every = entry.build_parser()
    (only_sub,) = (a for a in only._actions if a.dest == "command")
    (every_sub,) = (a for a in every._actions if a.dest == "command")
    assert list(only_sub.choices) == ["estimate"]
    assert list(every_sub.choices) == list(entry.COMMANDS)
    assert only_sub.choices["estimate"].format_help() == every_sub.choices["estimate"].format_help()


@pytest.mark.parametrize("command", ["estimate", "plan", "report", "models", None])
def test_estimator_commands_load_openblas_with_one_thread(command, monkeypatch):
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    entry._one_blas_thread(command)
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"


@pytest.mark.parametrize("command", sorted(entry.TORCH_COMMANDS))
def test_torch_commands_keep_the_users_blas_threads(command, monkeypatch):
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    entry._one_blas_thread(command)
    assert "OPENBLAS_NUM_THREADS" not in os.environ


def test_a_blas_thread_count_the_user_set_is_kept(monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    entry._one_blas_thread("estimate")
    assert os.environ["OPENBLAS_NUM_THREADS"] == "4"


def test_the_garbage_collector_stays_on_for_torch_corpora_and_figures():
    """Training, data preparation and figures run long or make cyclic garbage: never without
    the collector."""
    assert not entry.SHORT_COMMANDS & (entry.TORCH_COMMANDS | {"data", "report", "plot"})
    assert {"estimate", "plan", "fit", "models", "validate"} <= entry.SHORT_COMMANDS


@pytest.mark.parametrize("columns", ["", "60", "200", "0", "wide"])
def test_the_help_is_argparse_s_at_the_terminal_s_width_without_shutil(columns, monkeypatch):
    """OneLineParser reads the terminal's width itself (argparse would import shutil for it at
    every add_argument): the width shutil gives, so the help argparse prints."""
    import argparse
    import shutil

    from trainbudget.cli.args import OneLineParser, _terminal_columns

    monkeypatch.setenv("COLUMNS", columns)
    assert _terminal_columns() == shutil.get_terminal_size().columns
    (sub,) = (a for a in entry.build_parser("estimate")._actions if a.dest == "command")
    ours = sub.choices["estimate"].format_help()
    monkeypatch.setattr(OneLineParser, "_get_formatter", argparse.ArgumentParser._get_formatter)
    assert ours == sub.choices["estimate"].format_help()
    _, loaded = _run_as_program("estimate --model llama-3-8b --tokens 15e12 --json")
    assert "shutil" not in loaded
