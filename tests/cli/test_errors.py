"""Malformed CLI input: exit code 2, nothing on stdout, one line on stderr naming what was wrong.

Each case lists the `needles` stderr must contain: the offending field or option and, where a
value was given, that value. A needle that is a tuple is satisfied by any one of its spellings
(the CLI reports option values by their field name, `seq_len`, or by the option, `--seq-len`).
Config files are written into tmp_path; `{tmp}` in an argument is replaced by that folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clirun import cli

SRC = Path(__file__).resolve().parents[2] / "src"

# A complete, valid llama-style config; the bad ones below are variations of it.
GOOD_LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 256,
    "vocab_size": 100,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}


def _variant(**changes: object) -> str:
    """GOOD_LLAMA with keys changed; a value of `...` removes the key."""
    config = {k: v for k, v in GOOD_LLAMA.items() if changes.get(k) is not ...}
    config.update({k: v for k, v in changes.items() if v is not ...})
    return json.dumps(config)


BAD_CONFIGS = {
    "good.json": json.dumps(GOOD_LLAMA),
    "not_json.json": '{"model_type": "llama", hidden_size: 64',
    "a_list.json": json.dumps([GOOD_LLAMA]),
    "no_model_type.json": _variant(model_type=...),
    "bert.json": _variant(model_type="bert"),
    "no_hidden_size.json": _variant(hidden_size=...),
    "hidden_size_string.json": _variant(hidden_size="sixty-four"),
    "negative_layers.json": _variant(num_hidden_layers=-3),
}


@pytest.fixture
def tmp_configs(tmp_path: Path) -> Path:
    for name, text in BAD_CONFIGS.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def opt(name: str) -> tuple[str, str]:
    """An option's two accepted spellings in an error: `--seq-len` or `seq_len`."""
    return (f"--{name}", name.replace("-", "_"))


def run_case(argv: tuple[str, ...], tmp: Path) -> tuple[int, str, str]:
    return cli(*(a.replace("{tmp}", str(tmp)) for a in argv))


def assert_one_line_error(
    code: int, out: str, err: str, needles: tuple[str | tuple[str, ...], ...], tmp: Path
) -> None:
    assert code == 2, f"exit code {code}; stdout={out!r} stderr={err!r}"
    assert out == "", f"stdout should be empty on an error, got {out!r}"
    assert "Traceback" not in err, err
    line = err.rstrip("\n")
    assert line, "stderr is empty"
    assert "\n" not in line, f"stderr should be one line, got {len(line.splitlines())}: {err!r}"
    assert line.startswith("trainbudget"), line
    for needle in needles:
        spellings = needle if isinstance(needle, tuple) else (needle,)
        spellings = tuple(s.replace("{tmp}", str(tmp)) for s in spellings)
        assert any(s in line for s in spellings), f"none of {spellings} in {line!r}"


E = ("estimate", "--model", "gpt2")
L = ("estimate", "--model", "llama-2-7b")
FIT = ("fit", "--gpus", "8", "--gpu", "h100-sxm")
MFU = ("mfu", "--model", "gpt2")


def case(id: str, argv: tuple[str, ...], *needles: str | tuple[str, ...], xfail: str = ""):
    marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
    return pytest.param(argv, needles, id=id, marks=marks)


CASES = [
    # names from the tables: model presets, hardware, precision, optimizer
    case("unknown-preset", ("estimate", "--model", "gpt5"), "model", "gpt5", "gpt2"),
    case("unknown-gpu", (*E, "--gpu", "v100"), "gpu", "v100", "h100-sxm"),
    case("unknown-gpu-near-miss", (*E, "--gpu", "h100"), "gpu", "'h100'", "did you mean h100-nvl"),
    case(
        "unknown-model-near-miss", ("estimate", "--model", "llama-3-8"), "did you mean llama-3-8b"
    ),
    case("unknown-precision", (*E, "--precision", "fp12"), "precision", "fp12", "bf16-mixed"),
    case("unknown-optimizer", (*E, "--optimizer", "adamww"), "optimizer", "adamww", "adamw"),
    # named choices: the core's line (api.inputs.choices), which also lists the accepted names
    case("bad-recompute", (*E, "--recompute", "half"), opt("recompute"), "half", "selective"),
    case("bad-flops-formula", (*E, "--flops-formula", "8n"), opt("flops-formula"), "8n", "6n"),
    # --tokens
    case("tokens-negative", (*E, "--tokens", "-5"), opt("tokens"), "-5"),
    case("tokens-word", (*E, "--tokens", "abc"), opt("tokens"), "abc"),
    case("tokens-overflow", (*E, "--tokens", "1e999"), opt("tokens"), "1e999"),
    case("tokens-bad-suffix", (*E, "--tokens", "15Q"), opt("tokens"), "15Q"),
    case("tokens-empty", (*E, "--tokens", ""), opt("tokens"), "''"),
    # --gpus
    case("gpus-zero", (*E, "--gpus", "0"), opt("gpus"), "0"),
    case("gpus-negative", (*E, "--gpus", "-1"), opt("gpus"), "-1"),
    case("gpus-fraction", (*E, "--gpus", "1.5"), opt("gpus"), "1.5"),
    case("gpus-word", (*E, "--gpus", "x"), opt("gpus"), "'x'"),
    case("gpus-overflow", (*E, "--gpus", "1e999"), opt("gpus"), "1e999"),
    # --mfu
    case("mfu-zero", (*E, "--mfu", "0"), opt("mfu"), "'0'"),
    case("mfu-above-one", (*E, "--mfu", "1.5"), opt("mfu"), "1.5"),
    case("mfu-negative", (*E, "--mfu", "-0.1"), opt("mfu"), "-0.1"),
    case("mfu-word", (*E, "--mfu", "abc"), opt("mfu"), "abc"),
    case("mfu-nan", (*E, "--mfu", "nan"), opt("mfu"), "nan"),
    # --seq-len, --micro-batch, --price-per-gpu-hour
    case("seq-len-zero", (*E, "--seq-len", "0"), opt("seq-len"), "0"),
    case("seq-len-word", (*E, "--seq-len", "abc"), opt("seq-len"), "abc"),
    case(
        "seq-len-beyond-gpt2-positions",
        (*E, "--seq-len", "2048"),
        opt("seq-len"),
        "2048",
        "1024",
    ),
    case("micro-batch-zero", (*E, "--micro-batch", "0"), opt("micro-batch"), "0"),
    case("micro-batch-word", (*E, "--micro-batch", "many"), opt("micro-batch"), "many"),
    case(
        "price-negative",
        (*E, "--price-per-gpu-hour", "-1"),
        opt("price-per-gpu-hour"),
        "-1",
    ),
    # tokens from epochs
    case("epochs-without-samples", (*E, "--epochs", "2"), "--epochs", "--samples"),
    case(
        "tokens-and-epochs",
        (*E, "--tokens", "1e9", "--epochs", "2", "--samples", "10", "--mean-length", "5"),
        "--tokens",
        "--epochs",
        "1e9",
    ),
    case(
        "mean-length-word",
        (*E, "--epochs", "2", "--samples", "1e6", "--mean-length", "long"),
        opt("mean-length"),
        "long",
    ),
    case(
        "epochs-zero",
        (*E, "--epochs", "0", "--samples", "1e6", "--mean-length", "1000"),
        opt("epochs"),
        "0",
    ),
    # --set
    case("set-without-equals", (*E, "--set", "n_layers"), "--set", "n_layers"),
    case("set-unknown-field", (*E, "--set", "n_wings=2"), "--set", "n_wings"),
    case("set-heads-not-dividing", (*E, "--set", "n_heads=7"), "n_heads", "7", "d_model"),
    case("set-kv-heads-not-dividing", (*L, "--set", "n_kv_heads=5"), "n_kv_heads", "5", "n_heads"),
    case("set-mlp-relu", (*E, "--set", "mlp=relu"), "mlp", "relu"),
    case("set-bias-maybe", (*E, "--set", "bias=maybe"), "bias", "maybe"),
    case("set-d-model-word", (*E, "--set", "d_model=abc"), "d_model", "abc"),
    case("set-layers-negative", (*E, "--set", "n_layers=-1"), "n_layers", "-1"),
    case("set-layers-zero", (*E, "--set", "n_layers=0"), "n_layers", "0"),
    case("set-norm-unknown", (*E, "--set", "norm=batchnorm"), "norm", "batchnorm"),
    case(
        "set-on-dense",
        ("estimate", "--model", "dense:70e9", "--set", "n_layers=2"),
        "--set",
        "dense:70e9",
    ),
    # dense:N
    case("dense-negative", ("estimate", "--model", "dense:-5"), "model", "dense:-5"),
    case("dense-word", ("estimate", "--model", "dense:abc"), "model", "dense:abc"),
    case("dense-zero", ("estimate", "--model", "dense:0"), "model", "dense:0"),
    case("dense-empty", ("estimate", "--model", "dense:"), "model", "dense:"),
    case("dense-fraction", ("estimate", "--model", "dense:1.5"), "model", "dense:1.5"),
    # config.json files (written into tmp_path by the fixture)
    case(
        "config-missing",
        ("estimate", "--model", "{tmp}/missing.json"),
        "config",
        "{tmp}/missing.json",
    ),
    case(
        "config-not-json",
        ("estimate", "--model", "{tmp}/not_json.json"),
        "config",
        "not_json.json",
        "JSON",
    ),
    case(
        "config-json-list",
        ("estimate", "--model", "{tmp}/a_list.json"),
        "config",
        "a_list.json",
        "array",
    ),
    case(
        "config-no-model-type",
        ("estimate", "--model", "{tmp}/no_model_type.json"),
        "no_model_type.json",
        "model_type",
    ),
    case(
        "config-unsupported-model-type",
        ("estimate", "--model", "{tmp}/bert.json"),
        "model_type",
        "bert",
    ),
    case(
        "config-no-hidden-size",
        ("estimate", "--model", "{tmp}/no_hidden_size.json"),
        "hidden_size",
        "missing",
    ),
    case(
        "config-hidden-size-string",
        ("estimate", "--model", "{tmp}/hidden_size_string.json"),
        "hidden_size",
        "sixty-four",
    ),
    case(
        "config-negative-layers",
        ("estimate", "--model", "{tmp}/negative_layers.json"),
        "num_hidden_layers",
        "-3",
    ),
    case(
        "config-directory-without-config",
        ("estimate", "--model", "{tmp}/"),
        "config",
        "config.json",
    ),
    # fit
    case("fit-gpus-zero", ("fit", "--gpus", "0", "--gpu", "h100-sxm"), opt("gpus"), "0"),
    case("fit-unknown-gpu", ("fit", "--gpus", "8", "--gpu", "v100"), "gpu", "v100"),
    case("fit-adafactor", (*FIT, "--optimizer", "adafactor"), "optimizer", "adafactor"),
    case("fit-headroom-above-one", (*FIT, "--memory-headroom", "1.5"), "memory_headroom", "1.5"),
    case("fit-headroom-word", (*FIT, "--memory-headroom", "half"), "memory_headroom", "half"),
    case("fit-unknown-precision", (*FIT, "--precision", "fp12"), "precision", "fp12"),
    case("fit-missing-gpu", ("fit", "--gpus", "8"), "--gpu"),
    # intensity
    case(
        "intensity-matmul-without-b",
        ("intensity", "--op", "matmul", "--d", "64", "--f", "64"),
        "--b",
        "matmul",
    ),
    case("intensity-dot-n-zero", ("intensity", "--op", "dot", "--n", "0"), opt("n"), "0"),
    case(
        "intensity-unknown-dtype",
        ("intensity", "--op", "dot", "--n", "8", "--dtype", "fp99"),
        "dtype",
        "fp99",
    ),
    case("intensity-unknown-op", ("intensity", "--op", "conv", "--n", "8"), "--op", "conv"),
    # mfu
    case(
        "mfu-step-seconds-zero",
        (*MFU, "--step-seconds", "0", "--sequences", "8"),
        opt("step-seconds"),
        "0",
    ),
    case(
        "mfu-sequences-zero",
        (*MFU, "--step-seconds", "1", "--sequences", "0"),
        opt("sequences"),
        "0",
    ),
    case(
        "mfu-step-seconds-word",
        (*MFU, "--step-seconds", "fast", "--sequences", "8"),
        opt("step-seconds"),
        "fast",
    ),
    case(
        "mfu-dtype-without-peak",
        (*MFU, "--step-seconds", "1", "--sequences", "8", "--dtype", "fp99"),
        "dtype",
        "fp99",
    ),
    # regressions: each of these three once exited 0
    case(
        "mfu-seq-len-beyond-gpt2-positions",
        (*MFU, "--step-seconds", "1", "--sequences", "8", "--seq-len", "4096"),
        opt("seq-len"),
        "4096",
    ),
    case(
        "mfu-step-seconds-underflow",
        (*MFU, "--step-seconds", "1e-300", "--sequences", "8"),
        opt("step-seconds"),
        "1e-300",
    ),
    case(
        "mfu-impossible-above-peak",
        ("mfu", "--model", "dense:7e9", "--step-seconds", "1", "--sequences", "16"),
        opt("step-seconds"),
        ("> 1", "peak"),
    ),
    # dense:N has no shapes, so shape-dependent options fail on it (and only on it)
    case(
        "adafactor-on-dense",
        ("estimate", "--model", "dense:7e9", "--optimizer", "adafactor"),
        "optimizer",
        "adafactor",
        "dense",
    ),
    case(
        "palm-formula-on-dense",
        ("estimate", "--model", "dense:7e9", "--flops-formula", "palm"),
        "flops_formula",
        "palm",
    ),
    # argparse-level errors
    case("estimate-without-model", ("estimate",), "--model"),
    case("unknown-subcommand", ("frobnicate",), "frobnicate"),
    case("unknown-option", (*E, "--bogus"), "--bogus"),
    case("unknown-top-level-option", ("--bogus",), "--bogus"),
    case("mfu-without-step-seconds", (*MFU, "--sequences", "8"), "--step-seconds"),
]


@pytest.mark.parametrize(("argv", "needles"), CASES)
def test_bad_input_is_one_line_exit_2(argv, needles, tmp_configs: Path) -> None:
    code, out, err = run_case(argv, tmp_configs)
    assert_one_line_error(code, out, err, needles, tmp_configs)


def test_enough_cases() -> None:
    assert len(CASES) >= 45


def test_good_config_variant_is_accepted(tmp_configs: Path) -> None:
    """The bad configs are one change away from this one, which works: each failure is its own."""
    code, out, err = cli("estimate", "--model", str(tmp_configs / "good.json"), "--json")
    assert code == 0, err
    assert json.loads(out)["params"] > 0


def test_adafactor_needs_an_architecture() -> None:
    """adafactor works on a preset (it has matrix shapes) and fails on dense:N (it has none)."""
    code, out, err = cli("estimate", "--model", "llama-2-7b", "--optimizer", "adafactor", "--json")
    assert code == 0, err
    assert json.loads(out)["memory_bytes"]["optimizer"] > 0
    code, out, err = cli("estimate", "--model", "dense:7e9", "--optimizer", "adafactor")
    assert_one_line_error(code, out, err, ("optimizer", "adafactor"), Path())


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(("frobnicate",), id="unknown-subcommand"),
        pytest.param((*E, "--bogus"), id="unknown-option"),
    ],
)
def test_top_level_error_prefix_not_doubled(argv) -> None:
    """Regression: top-level argparse errors once read 'trainbudget trainbudget: error: ...'."""
    _, _, err = cli(*argv)
    assert err.startswith("trainbudget: error: "), err


def test_json_never_holds_infinity() -> None:
    """Regression: `--tokens 1e300 --json` once exited 0 printing 'Infinity' (not JSON)."""
    code, out, err = cli("estimate", "--model", "gpt2", "--tokens", "1e300", "--json")
    if code == 2:  # rejecting the overflow is as good as reporting it finitely
        assert_one_line_error(code, out, err, (opt("tokens"),), Path())
        return

    def no_constants(name: str) -> float:
        raise ValueError(f"non-standard JSON constant {name}")

    json.loads(out, parse_constant=no_constants)


SUBPROCESS_CASES = [
    pytest.param(
        ("estimate", "--model", "gpt2", "--tokens", "15Q"), ("tokens", "15Q"), id="tokens"
    ),
    pytest.param(("fit", "--gpus", "8", "--gpu", "v100"), ("gpu", "v100"), id="fit-gpu"),
    pytest.param(("frobnicate",), ("frobnicate",), id="unknown-subcommand"),
]


@pytest.mark.parametrize(("argv", "needles"), SUBPROCESS_CASES)
def test_bad_input_in_a_real_process(argv, needles, tmp_path: Path) -> None:
    """Outside the in-process harness: the real exit status and the real stderr stream."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "trainbudget", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, needles, tmp_path)


def test_recompute_every_without_full_recomputation_is_one_line() -> None:
    code, out, err = cli(
        "estimate", "--model", "llama-3-8b", "--gpus", "8", "--recompute-every", "2"
    )
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "recompute_every (2) > 1 needs recompute 'full'" in err
