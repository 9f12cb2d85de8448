"""The estimating core and the CLI never import torch (STYLE.md point 1): proved in a fresh
interpreter, since an earlier test in this process may have imported torch already."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _modules_after(code: str) -> set[str]:
    probe = code + "\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, check=True, capture_output=True, text=True
    ).stdout
    return set(out.split())


# the planner's grid evaluation is the one core module that uses numpy
NUMPY_MODULES = {"trainbudget.core.parallel.planner_fast"}


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
