"""The README promises two set-up commands on its first lines and real output in its examples;
CI runs the second command. Both promises are checked here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _setup_commands() -> list[str]:
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index("```sh")
    end = lines.index("```", start + 1)
    return lines[start + 1 : end]


def test_readme_opens_with_the_two_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[0] == "# trainbudget" and lines[2] == "```sh"
    main_job, tests = _setup_commands()
    assert "trainbudget estimate" in main_job and "pip install" in main_job
    assert "torch==2.13.0" in tests and "pytest" in tests


def test_ci_runs_the_readme_test_command():
    out = subprocess.run(
        [
            "awk",
            "/^```sh$/{inblock=1; next} inblock && /^```$/{exit} inblock{n++; if (n==2) print}",
            "README.md",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == _setup_commands()[1]
    assert "awk" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.torch  # the README shows `trainbudget profile`, measured with torch
def test_readme_examples_are_real_output():
    check = subprocess.run(
        [sys.executable, "scripts/refresh_readme.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout
