"""Nothing in the project unpickles unsafely (issue 6, must-show 4): no `weights_only` set to
False anywhere in the code, tests, scripts or benchmarks, and every torch.load in the product
code (src/, scripts/, benchmarks/, examples/) says weights_only=True explicitly. The checker
is tested on planted files too, so a passing run means something."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("src", "tests", "scripts", "benchmarks", "examples")
PRODUCT = ("src", "scripts", "benchmarks", "examples")  # explicit weights_only=True required
TEXT_SUFFIXES = {".py", ".md", ".txt", ".toml", ".cfg", ".ini", ".sh", ".yaml", ".yml", ".ipynb"}
# built from pieces so that this file does not match itself
UNSAFE = re.compile("weights_only" + r"\s*=\s*" + "False")


def _files(root: Path, folders: tuple[str, ...], suffixes: set[str]):
    for folder in folders:
        if (root / folder).is_dir():
            for path in sorted((root / folder).rglob("*")):
                if path.suffix in suffixes and path.is_file() and "__pycache__" not in path.parts:
                    yield path


def unsafe_flags(root: Path) -> list[str]:
    """`file:line` of every weights_only set to False, in any text file."""
    found = []
    for path in _files(root, SCANNED, TEXT_SUFFIXES):
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in UNSAFE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(root)}:{line}")
    return found


def _torch_loads(tree: ast.AST) -> list[ast.Call]:
    """Calls of torch.load, torch.serialization.load, or a name imported as either (aliases
    of torch included)."""
    modules, functions = {"torch", "torch.serialization"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in ("torch", "torch.serialization"):
                    modules.add(a.asname or a.name)
        elif isinstance(node, ast.ImportFrom) and node.module in ("torch", "torch.serialization"):
            for a in node.names:
                if a.name == "load":
                    functions.add(a.asname or a.name)
                elif a.name == "serialization":
                    modules.add(a.asname or a.name)
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if (isinstance(f, ast.Name) and f.id in functions) or (
            isinstance(f, ast.Attribute) and f.attr == "load" and ast.unparse(f.value) in modules
        ):
            calls.append(node)
    return calls


def implicit_loads(root: Path) -> list[str]:
    """`file:line` of every torch.load in the product code without weights_only=True."""
    found = []
    for path in _files(root, PRODUCT, {".py"}):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for call in _torch_loads(tree):
            safe = any(
                k.arg == "weights_only"
                and isinstance(k.value, ast.Constant)
                and k.value.value is True
                for k in call.keywords
            )
            if not safe:
                found.append(f"{path.relative_to(root)}:{call.lineno}")
    return found


def test_no_unsafe_load_in_the_repository() -> None:
    assert unsafe_flags(ROOT) == []
    assert implicit_loads(ROOT) == []
    # not vacuous: the checkpoint store's own torch.load is among the calls checked
    store = ROOT / "src" / "trainbudget" / "train" / "checkpointing" / "checkpoint.py"
    assert store in list(_files(ROOT, PRODUCT, {".py"}))
    assert len(_torch_loads(ast.parse(store.read_text(encoding="utf-8")))) >= 1


def test_the_checks_find_planted_files(tmp_path: Path) -> None:
    off = "weights_only" + " = " + "False"
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "tests").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / "src" / "pkg" / "ok.py").write_text(
        "import torch\nx = torch.load('a.pt', weights_only=True, map_location='cpu')\n"
    )
    (tmp_path / "src" / "pkg" / "bad.py").write_text(
        "import torch\n"
        "import torch as th\n"
        "from torch import load as L\n"
        "from torch import serialization\n"
        "a = torch.load('a.pt')\n"
        f"b = torch.load('b.pt', {off})\n"
        "c = th.load('c.pt', **{'weights_only': True})\n"
        "d = L('d.pt')\n"
        "e = serialization.load('e.pt', weights_only=1)\n"
        "f = torch.serialization.load('f.pt')\n"
        "g = other.load('g.pt')\n"  # not torch: ignored
    )
    (tmp_path / "tests" / "test_x.py").write_text(f"import torch\ntorch.load('x', {off})\n")
    (tmp_path / "scripts" / "notes.md").write_text(f"run it with\n\n    {off}\n")
    assert sorted(unsafe_flags(tmp_path)) == [
        "scripts/notes.md:3",
        "src/pkg/bad.py:6",
        "tests/test_x.py:2",
    ]
    assert implicit_loads(tmp_path) == [f"src/pkg/bad.py:{n}" for n in (5, 6, 7, 8, 9, 10)]
