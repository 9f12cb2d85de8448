"""The README path in order (issue 24, part 2): every command of README.md's shell blocks, run in
the order shown, in one fresh copy of the project. The existing README tests check outputs
(test_readme.py) and each command alone in a torch-less environment (test_readme_newcomer.py);
before this one, `train --out runs/default --steps 120` failed after the bare `trainbudget train`
shown before it ("holds checkpoints of an earlier run"), and nothing noticed.

Which blocks count: the shell blocks (```sh, ```bash or ```shell), what a reader types. The
```console blocks show a command with its output; test_readme.py runs them for the output, and
none writes a file, so their order cannot matter. ```text blocks are excerpts.

How they run:
- The fresh copy is the working tree's tracked files and its untracked files that git does not
  ignore (`git ls-files -co --exclude-standard`), copied into a temporary folder: a `git clone`
  would miss the uncommitted work. The copy's `src/` comes first on PYTHONPATH, so the copy is
  what runs.
- Set-up segments (`python3 -m venv`, `pip install`) are replaced by the virtual environment
  already installed: `.venv` in the copy is a link to it, and its bin/ is first on PATH, as
  `. .venv/bin/activate` makes it (the README says to activate it). No network is needed.
- `TRAINBUDGET_MAX_STEPS=20` (named in the README) cuts every training run to 20 steps.
- A command marked `# killed at any moment...` is killed: SIGTERM once it reports its first
  step. It must save a checkpoint and exit 143 (128 + SIGTERM), and the next command resumes.
- SKIPPED lists what does not run here, each with its reason.

Every other command must exit 0. The whole path is bounded (TOTAL_SECONDS); on the 2-core
development machine it takes about a minute.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
READMES = ("README.md", "README.zh-CN.md")
FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```$", re.DOTALL | re.MULTILINE)
SHELL_BLOCKS = ("sh", "bash", "shell")
MAX_STEPS = 20
TOTAL_SECONDS = 300
"""A bound, not the target: about 60 s on 2 cores; a command still running at the bound is
killed and the test fails naming it."""
SETUP = ("python3 -m venv ", ".venv/bin/pip install ", "pip install ")
"""Segments that make the environment, replaced by the one already installed."""
SKIPPED = {
    ".venv/bin/python -m pytest": "the test suite itself, which holds this test (CI runs it "
    "by this very line: .ci/run)",
    "trainbudget serve": "serves the planner page until stopped (tests/serve/ drives it)",
    "python scripts/report_screenshots.py": "needs Chromium",
    "python scripts/gpu_validate.py": "needs a CUDA GPU",
    "git clone ": "needs the network (this test stands for the fresh clone)",
    "curl ": "needs the network",
    "wget ": "needs the network",
    "sudo ": "installs system packages: needs the network and root",
    "apt-get ": "installs system packages: needs the network and root",
    "brew ": "installs system packages: needs the network",
}
"""Segments not run here, by how they start (`.venv/bin/` before a program's name or not):
why each."""
KILLED = "killed at any moment"
"""A command whose README comment says this is interrupted as the comment says."""


@dataclass(frozen=True)
class Command:
    """One line of a shell block as it runs here: `run` ('' when nothing is left to run),
    the README's line, whether it is to be killed, and the segments skipped with why."""

    readme_line: str
    run: str
    killed: bool
    skipped: tuple[str, ...]


def _command(line: str) -> Command:
    text, _, comment = line.partition(" # ")
    kept, skipped = [], []
    for segment in (s.strip() for s in text.split(" && ")):
        if segment.startswith(SETUP):
            continue
        bare = segment.removeprefix(".venv/bin/")
        why = next(
            (w for k, w in SKIPPED.items() if segment.startswith(k) or bare.startswith(k)), None
        )
        if why is not None:
            skipped.append(f"{segment}: {why}")
            continue
        kept.append(segment)
    return Command(line, " && ".join(kept), KILLED in comment, tuple(skipped))


def shell_commands(name: str) -> list[Command]:
    """Every line of one README's shell blocks, in order."""
    text = (ROOT / name).read_text(encoding="utf-8")
    return [
        _command(line)
        for m in FENCE.finditer(text)
        if m.group(1) in SHELL_BLOCKS
        for line in m.group(2).splitlines()
        if line.strip()
    ]


def _train_out(command: str) -> tuple[str, bool] | None:
    """(--out, resumes?) of a `trainbudget train` command, or None for another command."""
    words = shlex.split(command)
    if "train" not in words or not any(Path(w).name == "trainbudget" for w in words):
        return None
    default = "runs/default"  # TrainConfig's `out` (test_the_default_out_is_the_one_assumed)
    out = words[words.index("--out") + 1] if "--out" in words else default
    return out, "--resume" in words


def test_the_default_out_is_the_one_assumed() -> None:
    pytest.importorskip("numpy")
    from trainbudget.train.spec.config import config_fields

    assert config_fields()["out"].default == "runs/default"


@pytest.mark.parametrize("name", READMES)
def test_no_fresh_run_goes_into_a_folder_an_earlier_one_used(name: str) -> None:
    """What broke the path, checked statically in both READMEs (their sections are in another
    order): a train without --resume into an --out that an earlier command trained into is
    refused by the trainer ("holds checkpoints of an earlier run")."""
    used: dict[str, str] = {}
    for command in shell_commands(name):
        found = _train_out(command.run)
        if found is None:
            continue
        out, resumes = found
        assert resumes or out not in used, (
            f"{name}: {command.readme_line!r} trains afresh into {out}, which "
            f"{used.get(out)!r} used"
        )
        used.setdefault(out, command.readme_line)


def test_the_readmes_run_the_same_commands() -> None:
    en, zh = (sorted(c.readme_line for c in shell_commands(n)) for n in READMES)
    assert en == zh


def test_the_extraction_sees_the_path() -> None:
    """The commands this test is about are found, and set-up is replaced, not run."""
    commands = shell_commands("README.md")
    runs = [c.run for c in commands]
    assert runs[0].startswith(".venv/bin/trainbudget estimate --model llama-3-70b")
    assert runs[1] == ".venv/bin/python -m ruff check src tests benchmarks scripts examples"
    assert "pytest" in commands[1].skipped[0]
    assert sum(c.killed for c in commands) == 1
    assert any(r.startswith("torchrun ") for r in runs)
    assert "trainbudget train" in runs
    assert any(r.startswith("trainbudget report --run") for r in runs)
    assert not any(r.startswith(SETUP) or " pip " in f" {r} " for r in runs)


def test_no_source_file_is_ignored_by_git() -> None:
    """A .py file git ignores is missing from every clone (and from the copy below): `runs/`
    in .gitignore once hid src/trainbudget/published/runs/. Anchor such patterns (`/runs/`)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    ignored = subprocess.run(
        ["git", "ls-files", "-o", "-i", "--exclude-standard", "--", "src", "tests", "scripts"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    hidden = [name for name in ignored if name.endswith(".py")]
    assert hidden == [], f"ignored by .gitignore, so missing from every clone: {hidden}"


def _fresh_copy(dest: Path) -> Path:
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is not copied
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    (dest / ".venv").symlink_to(ROOT / ".venv")
    return dest


def _environment(copy: Path) -> dict[str, str]:
    """The reader's shell after `. .venv/bin/activate`, running the copy's sources."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    venv = ROOT / ".venv"
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["PYTHONPATH"] = str(copy / "src")
    env["TRAINBUDGET_MAX_STEPS"] = str(MAX_STEPS)
    env.setdefault("OMP_NUM_THREADS", "1")  # the two ranks of torchrun share 2 cores
    return env


def _run_killed(command: str, cwd: Path, env: dict, seconds: float) -> tuple[int, str]:
    """Start `command`, send SIGTERM once it reports its first step; (exit code, stderr)."""
    proc = subprocess.Popen(
        ["bash", "-c", f"exec {command}"],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = []
    deadline = time.monotonic() + seconds
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("step "):
                proc.send_signal(signal.SIGTERM)
                break
            if time.monotonic() > deadline:
                break
        rest = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, "".join(seen) + (rest or "")


@pytest.mark.slow
@pytest.mark.torch
def test_every_readme_command_runs_in_the_order_shown(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout (the fresh copy is its files as git lists them)")
    copy = _fresh_copy(tmp_path / "clone")
    env = _environment(copy)
    where = subprocess.run(
        [sys.executable, "-c", "import trainbudget; print(trainbudget.__file__)"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(copy / "src")), where  # the copy runs, not the checkout
    deadline = time.monotonic() + TOTAL_SECONDS
    after_kill = False
    for command in shell_commands("README.md"):
        if not command.run:
            continue
        left = deadline - time.monotonic()
        assert left > 0, f"the README path took over {TOTAL_SECONDS} s; not run: {command.run}"
        if command.killed:
            code, err = _run_killed(command.run, copy, env, left)
            assert code == 128 + signal.SIGTERM, f"{command.run}: exit {code}\n{err[-3000:]}"
            assert "Traceback" not in err, f"{command.run}:\n{err[-3000:]}"
            assert "checkpoint saved" in err, f"{command.run}:\n{err[-3000:]}"
            after_kill = True
            continue
        try:
            r = subprocess.run(
                ["bash", "-c", command.run],
                cwd=copy,
                env=env,
                capture_output=True,
                text=True,
                timeout=left,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"{command.run}: still running at the {TOTAL_SECONDS} s bound")
        said = (r.stdout + r.stderr)[-3000:]
        assert r.returncode == 0, f"{command.run}: exit {r.returncode}\n{said}"
        if after_kill:  # "...continues bitwise": from the killed run's checkpoint
            assert "resumed from " in r.stderr, r.stderr[-3000:]
            after_kill = False
    # what the path promises: the interrupted run continued to its (capped) last step
    assert (copy / "runs" / "a" / "summary.json").is_file()
    assert (copy / "runs" / "short" / "report.html").is_file()
