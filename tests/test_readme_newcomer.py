"""A newcomer's first hour: every `trainbudget` command in the code blocks of README.md and
README.zh-CN.md, run the way command 1 sets things up (a fresh virtual environment holding
trainbudget and its one dependency, numpy; no torch, no matplotlib, no tokenizers). Each one
works (exit 0), or exits 2 with the one line the README shows under it (its documented
errors), or exits 2 with one line saying what to install (the commands that need torch).

How the environment is built, without a network: `python -m venv --without-pip` (ensurepip's
bundled setuptools is older than pyproject's `setuptools>=68`, so `pip install -e .` cannot
build offline), then what `pip install -e .` would put there: a `.pth` file naming this
checkout's `src/`, numpy linked from the interpreter running the tests (pyproject's only
dependency; a test below fails if that changes), and a `bin/trainbudget` script calling
`trainbudget.cli.main:main`, as pip's console-script wrapper does. The test checks that torch,
matplotlib and tokenizers cannot be imported there.

Commands are read from the README files, not listed here: `$ trainbudget ...` lines of console
blocks (with the output shown under them) and `trainbudget ...` segments of sh blocks (command
1's `.venv/bin/trainbudget` included). Other programs (`torchrun ... -m trainbudget`, pip,
pytest) are not trainbudget commands. They run in README order in one temporary folder, so
relative output paths (`--out report.html`, `runs/a`) land there.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from trainbudget.cli.main import INSTALL_HINTS

pytestmark = pytest.mark.slow  # a fresh environment and some 30 processes: ~20 s on 2 cores

ROOT = Path(__file__).resolve().parents[1]
READMES = ("README.md", "README.zh-CN.md")
FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```$", re.DOTALL | re.MULTILINE)
# pytest's own output says how long the whole module took; each command has this much
TIMEOUT_SECONDS = 60
NOT_INSTALLED = ("torch", "matplotlib", "tokenizers", "tensorboard")
# commands whose input is what an earlier command, which needs torch, would have written:
# without torch they can only say that their input is missing (exit 2, one line)
NEEDS_AN_EARLIER_OUTPUT = {
    "report --run runs/short": "reads the run folder `trainbudget train` writes; train needs torch",
}
# commands that run until stopped, keyed on the words after `trainbudget`: not run here
# (tests/serve starts the server on a free port, asks it questions and stops it)
TOO_LONG: dict[str, str] = {
    "serve": "a server: it answers until interrupted, so it would only run out the timeout",
}


@dataclass(frozen=True)
class Example:
    """One command as a README shows it: the words after `trainbudget`, and the output the
    README prints under it ('' where it shows none)."""

    args: str
    shown: str


def _console_examples(block: str) -> list[Example]:
    found: list[Example] = []
    for chunk in re.split(r"^\$ ", block, flags=re.MULTILINE)[1:]:
        command, _, shown = chunk.partition("\n")
        command = command.split(" | ")[0]  # `trainbudget validate | tail -1`
        if command.startswith("trainbudget "):
            found.append(Example(command.removeprefix("trainbudget ").strip(), shown))
    return found


def _shell_examples(block: str) -> list[Example]:
    found: list[Example] = []
    for line in block.splitlines():
        line = line.split(" # ")[0]  # `trainbudget train ... # killed at any moment...`
        for segment in re.split(r"&&|\|\||;|\|", line):
            words = shlex.split(segment)
            if words and Path(words[0]).name == "trainbudget":  # .venv/bin/trainbudget too
                found.append(Example(shlex.join(words[1:]), ""))
    return found


def readme_examples(name: str) -> list[Example]:
    """Every trainbudget command of one README's code blocks, in order."""
    text = (ROOT / name).read_text(encoding="utf-8")
    found: list[Example] = []
    for m in FENCE.finditer(text):
        lang, block = m.group(1), m.group(2)
        found += _console_examples(block) if lang == "console" else _shell_examples(block)
    return found


def all_examples() -> list[Example]:
    """Both READMEs' commands, each once (the Chinese README repeats the English commands)."""
    seen: dict[str, Example] = {}
    for name in READMES:
        for example in readme_examples(name):
            seen.setdefault(example.args, example)
    return list(seen.values())


def test_the_readmes_show_commands_of_every_kind() -> None:
    """The extraction finds what a reader sees: command 1, documented errors, torch commands."""
    args = [e.args for e in all_examples()]
    assert any(a.startswith("estimate --model llama-3-70b") and "--explain" in a for a in args)
    assert any(e.shown.startswith("trainbudget estimate: error:") for e in all_examples())
    assert {"models", "hardware", "dtypes", "validate"} <= set(args)
    assert any(a.startswith("train ") for a in args)
    assert any(a.startswith("profile ") for a in args)
    assert len(args) >= 25


def test_each_skipped_command_is_one_the_readmes_show() -> None:
    """A skip rule that matches no README command hides nothing and is stale; `serve` is one."""
    args = [e.args for e in all_examples()]
    assert any(a.startswith("serve") for a in args)
    for key in TOO_LONG:
        assert any(a.startswith(key) for a in args), f"TOO_LONG[{key!r}] matches no command"


def test_pip_would_install_numpy_and_nothing_else() -> None:
    """What the fresh environment links in must be what `pip install -e .` installs."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    listed = re.search(r"^dependencies = \[(.*?)\]", pyproject, re.MULTILINE | re.DOTALL)
    assert listed is not None
    names = [re.split(r"[<>=!~ ]", d.strip(' "'))[0] for d in listed.group(1).split(",") if d]
    assert names == ["numpy"]


def _link_numpy(site: Path) -> None:
    """numpy, its bundled libraries and its metadata, from this interpreter's environment."""
    spec = importlib.util.find_spec("numpy")
    assert spec is not None and spec.submodule_search_locations
    source = Path(spec.submodule_search_locations[0]).parent
    for entry in source.iterdir():
        if entry.name == "numpy" or entry.name.startswith(("numpy.libs", "numpy-")):
            (site / entry.name).symlink_to(entry)


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("newcomer") / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "trainbudget-editable.pth").write_text(f"{ROOT / 'src'}\n")
    _link_numpy(site)
    script = venv / "bin" / "trainbudget"
    script.write_text(
        f"#!{python}\nimport sys\nfrom trainbudget.cli.main import main\nsys.exit(main())\n"
    )
    script.chmod(0o755)
    return venv


def _clean_env(venv: Path) -> dict[str, str]:
    """The user's shell: the fresh environment's bin first, nothing of the test run's paths."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_the_fresh_environment_has_no_torch(fresh_venv: Path) -> None:
    probe = (
        "import importlib.util, numpy, trainbudget; "
        f"print([m for m in {NOT_INSTALLED!r} if importlib.util.find_spec(m)])"
    )
    out = subprocess.run(
        [fresh_venv / "bin" / "python", "-c", probe],
        env=_clean_env(fresh_venv),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "[]"


def _verdict(example: Example, code: int, out: str, err: str) -> str | None:
    """What is wrong with one command's run, or None when it did what the README promises."""
    lines = err.strip().splitlines()
    first_shown = example.shown.splitlines()[0] if example.shown else ""
    if re.match(r"trainbudget [a-z]+: error: ", first_shown):  # a documented error
        if code == 2 and lines == [first_shown]:
            return None
        return f"README shows {first_shown!r}; got exit {code}, stderr {err!r}"
    if code == 0:
        return None
    if "Traceback" in err or code != 2 or len(lines) != 1:
        return f"exit {code}, stderr {err[-2000:]!r}"
    if any(k in example.args for k in NEEDS_AN_EARLIER_OUTPUT):
        return None
    hints = [f"needs {m}, which is not installed: {h}" for m, h in INSTALL_HINTS.items()]
    if any(h in lines[0] for h in hints):
        return None
    return f"exit 2 without an install hint: {lines[0]!r}"


def test_every_readme_command_works_or_says_what_to_install(
    fresh_venv: Path, tmp_path: Path
) -> None:
    """All commands in one test, in README order: a later command may read what an earlier
    one wrote (`report --run` after `train`). They run in a folder of their own, holding what a
    clone has that the README's commands read (`examples/`: `validate --runs`'s file)."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    problems = []
    for example in all_examples():
        if any(example.args.startswith(k) for k in TOO_LONG):
            continue
        run = subprocess.run(
            [fresh_venv / "bin" / "trainbudget", *shlex.split(example.args)],
            cwd=tmp_path,
            env=_clean_env(fresh_venv),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
        )
        problem = _verdict(example, run.returncode, run.stdout, run.stderr)
        if problem:
            problems.append(f"trainbudget {example.args}: {problem}")
    assert not problems, "\n".join(problems)
