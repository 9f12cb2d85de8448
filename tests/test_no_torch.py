"""The estimating core, the CLI and the report (with the run reader it draws from) never import
torch (STYLE.md point 1): proved in a fresh
interpreter, since an earlier test in this process may have imported torch already."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _modules_after(code: str) -> set[str]:
    probe = code + "\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, check=True, capture_output=True, text=True
    ).stdout
    return set(out.split())


# the planner's grid evaluation (and the product its plans are laid on) uses numpy
NUMPY_MODULES = {
    "trainbudget.core.parallel.search.planner_fast",
    "trainbudget.core.parallel.search.product_grid",
    "trainbudget.core.parallel.search.plan_grid",
}


def _core_modules() -> list[str]:
    root = Path(SRC)
    return sorted(
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for p in (root / "trainbudget" / "core").rglob("*.py")
    )


def test_core_imports_no_torch():
    core = _core_modules()
    plain = [m for m in core if m not in NUMPY_MODULES]
    loaded = _modules_after("\n".join(f"import {m}" for m in plain))
    assert "torch" not in loaded
    assert "numpy" not in loaded  # not needed: the core is plain arithmetic
    assert set(plain) <= loaded
    loaded = _modules_after("\n".join(f"import {m}" for m in core))
    assert "torch" not in loaded
    assert set(core) <= loaded


def test_cli_estimate_imports_no_torch():
    code = (
        "from trainbudget.cli.main import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['estimate', '--model', 'llama-2-7b', '--tokens', '2T', '--json'])"
    )
    assert "torch" not in _modules_after(code)


def _modules_of(package: str) -> list[str]:
    root = Path(SRC)
    return sorted(
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for p in (root / "trainbudget" / package).rglob("*.py")
    )


def test_report_and_the_run_reader_import_no_torch_and_draw_lazily():
    modules = [*_modules_of("report"), "trainbudget.train.spec.run_files"]
    loaded = _modules_after("\n".join(f"import {m}" for m in modules))
    assert "torch" not in loaded
    assert "matplotlib" not in loaded  # imported when a figure is drawn, not before
    assert set(modules) <= loaded


def test_report_and_plot_of_a_run_work_where_torch_cannot_be_imported(tmp_path):
    pytest.importorskip("matplotlib")
    from synthetic_runs import write_run

    run, page = write_run(tmp_path / "run"), tmp_path / "r.html"
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # `import torch` now fails\n"
        "from trainbudget.cli.main import main\n"
        f"assert main(['report', '--run', {str(run)!r}, '--out', {str(page)!r}]) == 0\n"
        f"assert main(['plot', {str(run)!r}]) == 0"
    )
    _modules_after(code)  # check=True: a failed assertion or an import of torch raises
    assert page.is_file() and (run / "loss.png").is_file()


@pytest.mark.parametrize(
    "argv",
    [
        ["profile", "--model", "gpt2", "--set", "n_layers=1"],
        ["bench"],
        ["train", "--steps", "1"],
    ],
    ids=lambda argv: argv[0],
)
def test_torch_commands_without_torch_print_the_install_line(argv, tmp_path):
    """Issue 13, point 5: a command that needs torch, run where torch cannot be imported, exits
    2 with one line naming torch and the pinned install, never a traceback."""
    full = [*argv, "--out", str(tmp_path / "run")] if argv[0] == "train" else argv
    code = (
        "import sys, contextlib, io\n"
        "sys.modules['torch'] = None  # `import torch` now fails\n"
        "from trainbudget.cli.main import main\n"
        "err = io.StringIO()\n"
        "with contextlib.redirect_stderr(err):\n"
        f"    rc = main({full!r})\n"
        "print(rc)\n"
        "print(err.getvalue(), end='')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out[0] == "2"
    assert len(out) == 2, out
    assert out[1].startswith(f"trainbudget {argv[0]}: error: needs torch, which is not installed")
    assert "pip install torch==2.13.0" in out[1]
