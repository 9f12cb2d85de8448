"""`trainbudget data prepare` through the CLI: happy paths, progress, malformed input -> exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clirun import cli
from trainbudget.data import prepare as prepare_module

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_default_corpus_json(tmp_path: Path) -> None:
    code, out, err = cli("data", "prepare", "--out", str(tmp_path / "d"), "--json")
    assert code == 0, err
    assert err == ""
    meta = json.loads(out)
    assert meta["out"] == str(tmp_path / "d")
    assert meta["sources"][0]["name"] == "python-docs"
    assert meta["tokens"]["train"] == (tmp_path / "d" / "train.bin").stat().st_size // 2


def test_sources_weights_and_text_field(corpus: dict[str, Path], tmp_path: Path) -> None:
    argv = [str(corpus["text"]), f"notes={corpus['folder']}:3", str(corpus["jsonl"])]
    options = ["--text-field", "body", "--val-fraction", "0.2", "--seed", "5"]
    code, out, err = cli("data", "prepare", *argv, "--out", str(tmp_path / "d"), *options)
    assert code == 0, err
    for needle in ("stories", "notes", "web", "byte", "257", "uint16"):
        assert needle in out, needle
    meta = json.loads((tmp_path / "d" / "meta.json").read_text(encoding="utf-8"))
    assert [s["weight"] for s in meta["sources"]] == [1.0, 3.0, 1.0]
    assert meta["seed"] == 5 and meta["val_fraction"] == 0.2


def test_progress_lines_on_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.txt").write_text("some text\n" * 50, encoding="utf-8")
    monkeypatch.setattr(prepare_module, "PROGRESS_MIN_BYTES", 0)
    code, out, err = cli("data", "prepare", str(tmp_path / "a.txt"), "--out",
                         str(tmp_path / "d"), "--json")  # fmt: skip
    assert code == 0, err
    assert "data prepare: a: done, 100% of the input" in err
    json.loads(out)  # progress never mixes into stdout


def test_data_without_action_and_help() -> None:
    code, _, err = cli("data")
    assert code == 2 and "prepare" in err
    code, out, _ = cli("data", "prepare", "--help")
    assert code == 0 and out.startswith("usage: trainbudget data prepare")
    for option in ("--out", "--tokenizer", "--vocab-size", "--val-fraction", "--text-field",
                   "--seed", "--json"):  # fmt: skip
        assert option in out, option


def _write(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text, encoding="utf-8")
    return str(tmp_path / name)


BAD_INPUTS = {
    "missing file": (lambda t: [str(t / "nope.txt")], ("source", "nope.txt")),
    "empty corpus": (lambda t: [_write(t, "empty.txt", "")], ("source", "contains no text")),
    "empty folder": (lambda t: [str(t)], ("source", "no *.txt")),
    "val fraction too big": (
        lambda t: ["--val-fraction", "0.7"],
        (("val_fraction", "--val-fraction"), "0.7"),
    ),
    "val fraction negative": (lambda t: ["--val-fraction", "-0.1"], ("val_fraction", "-0.1")),
    "val fraction not a number": (lambda t: ["--val-fraction", "half"], ("val_fraction", "half")),
    "bpe vocab too small": (
        lambda t: ["--tokenizer", "bpe", "--vocab-size", "100"],
        ("vocab_size", "100", "257"),
    ),
    "byte vocab fixed": (lambda t: ["--vocab-size", "1000"], ("vocab_size", "1000")),
    "vocab not a number": (lambda t: ["--tokenizer", "bpe", "--vocab-size", "lots"], ("vocab",)),
    "weight zero": (lambda t: [_write(t, "a.txt", "hi") + ":0"], ("weight", "0")),
    "weight negative": (lambda t: [_write(t, "a.txt", "hi") + ":-2"], ("weight", "-2")),
    "jsonl not json": (
        lambda t: [_write(t, "x.jsonl", '{"text": "ok"}\n{"text": broken\n')],
        ("source", "line 2", "not JSON"),
    ),
    "jsonl lacks field": (
        lambda t: [_write(t, "y.jsonl", '{"text": "ok"}\n{"text": "ok"}\n{"body": "no"}\n')],
        ("text_field", "line 3"),
    ),
    "duplicate names": (
        lambda t: [_write(t, "a.txt", "hi"), "a=" + _write(t, "b.txt", "ho")],
        ("source", "unique"),
    ),
    "tokenizer file missing": (
        lambda t: ["--tokenizer", str(t / "tok.json")],
        ("tokenizer", "tok.json"),
    ),
    "seed not an integer": (lambda t: ["--seed", "x"], ("seed",)),
    # issue 15, item 9: binary input was tokenized as text
    "binary file": (
        lambda t: [_write_bytes(t, "model.bin", ELF_HEAD)],
        ("source", "model.bin", "looks binary (a NUL byte at offset 7)", "--allow-binary"),
    ),
    "binary file in a folder": (
        lambda t: [_folder_with(t, "blob.txt", b"text" + bytes([0xFF, 0xFE]) + b"more")],
        ("source", "blob.txt", "not UTF-8 at offset 4"),
    ),
}

ELF_HEAD = b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4  # how an executable starts


def _write_bytes(tmp_path: Path, name: str, data: bytes) -> str:
    (tmp_path / name).write_bytes(data)
    return str(tmp_path / name)


def _folder_with(tmp_path: Path, name: str, data: bytes) -> str:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "fine.md").write_text("plain text", encoding="utf-8")
    (folder / name).write_bytes(data)
    return str(folder)


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_exits_2_with_one_line(case: str, tmp_path: Path) -> None:
    make_argv, needles = BAD_INPUTS[case]
    inputs = tmp_path / "in"
    inputs.mkdir()
    out_dir = tmp_path / "out"
    code, out, err = cli("data", "prepare", *make_argv(inputs), "--out", str(out_dir))
    assert code == 2, (out, err)
    assert out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        spellings = needle if isinstance(needle, tuple) else (needle,)
        assert any(s in err for s in spellings), (needle, err)
    assert not out_dir.exists() or not (out_dir / "meta.json").exists()


def test_bpe_without_library_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    code, _, err = cli("data", "prepare", "--out", str(tmp_path / "d"), "--tokenizer", "bpe")
    assert code == 2 and "tokenizer" in err and "pip install" in err


def test_missing_out_is_an_argparse_error() -> None:
    code, _, err = cli("data", "prepare")
    assert code == 2 and "--out" in err


def test_prepare_never_imports_torch(tmp_path: Path) -> None:
    code = (
        "import argparse, contextlib, io, sys\n"
        "from trainbudget.cli.run import data_cmd\n"
        "data_cmd.add_arguments(argparse.ArgumentParser(), 'data')\n"
        "assert 'numpy' not in sys.modules, 'the data parser imported numpy'\n"
        "from trainbudget.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert main(['data', 'prepare', '--out', {str(tmp_path / 'd')!r}]) == 0\n"
        "assert 'torch' not in sys.modules\n"
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


def test_allow_binary_tokenizes_it_anyway(tmp_path: Path) -> None:
    source = _write_bytes(tmp_path, "model.bin", ELF_HEAD)
    out_dir = tmp_path / "out"
    code, _, err = cli("data", "prepare", source, "--out", str(out_dir), "--allow-binary")
    assert code == 0, err
    assert json.loads((out_dir / "meta.json").read_text())["tokens"]["train"] > 0


def test_text_is_not_binary(tmp_path: Path) -> None:
    """UTF-8 text passes, a character cut by the end of the sniffed bytes included."""
    from trainbudget.data.sources import SNIFF_BYTES, binary_reason

    path = tmp_path / "t.txt"
    path.write_bytes(b"a" * (SNIFF_BYTES - 1) + "é".encode())  # é's 2nd byte past the sample
    assert binary_reason(path) is None
    path.write_bytes("plain, ünïcode text\n".encode() * 10)
    assert binary_reason(path) is None
