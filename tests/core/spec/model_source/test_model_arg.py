"""The CLI model argument: presets, config paths, dense:N, and --set overrides."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.single.params import count_params
from trainbudget.core.spec.model_source.model_arg import parse_overrides, resolve_model
from trainbudget.core.spec.model_spec import BareModel, ModelSpec
from trainbudget.core.spec.presets import PRESETS

DATA = Path(__file__).resolve().parents[3] / "data" / "hf"


def test_preset():
    assert resolve_model("gpt2") is PRESETS["gpt2"]
    assert resolve_model("  llama-2-7b ") is PRESETS["llama-2-7b"]


def test_config_path():
    spec = resolve_model(str(DATA / "mistral-7b.json"))
    assert isinstance(spec, ModelSpec)
    assert count_params(spec).total == 7_241_732_096


def test_config_path_without_json_suffix_and_directory(tmp_path):
    plain = tmp_path / "llama_config"
    plain.write_text((DATA / "llama-2-7b.json").read_text())
    assert count_params(resolve_model(str(plain))).total == 6_738_415_616
    (tmp_path / "config.json").write_text((DATA / "gpt2.json").read_text())
    assert count_params(resolve_model(str(tmp_path))).total == 124_439_808


def test_missing_json_path_is_a_file_error(tmp_path):
    with pytest.raises(SpecError, match="not found"):
        resolve_model(str(tmp_path / "absent.json"))


@pytest.mark.parametrize(
    ("arg", "n"),
    [
        ("dense:70e9", 70_000_000_000),
        ("dense:70B", 70_000_000_000),
        ("dense:15T", 15_000_000_000_000),
        ("dense:124M", 124_000_000),
        ("dense:1.5B", 1_500_000_000),
        ("dense:123456789012345678", 123456789012345678),
        ("DENSE: 7e9", 7_000_000_000),
    ],
)
def test_dense(arg, n):
    model = resolve_model(arg)
    assert isinstance(model, BareModel)
    assert model.n_params == n
    assert isinstance(model.n_params, int)


def test_overrides_seed_003():
    spec = resolve_model("gpt2", ["bias=false"])
    assert count_params(spec).total == 124_337_664
    assert PRESETS["gpt2"].bias  # the preset itself is untouched


def test_override_types_and_units():
    spec = resolve_model(
        "gpt2",
        [
            "n_layers=24",
            "max_seq_len=4k",
            "d_ff=32e2",
            "tied_embeddings=No",
            "qkv_bias=1",
            "mlp=swiglu",
        ],
    )
    assert (spec.n_layers, spec.max_seq_len, spec.d_ff) == (24, 4000, 3200)
    assert spec.tied_embeddings is False and spec.qkv_bias is True and spec.mlp == "swiglu"
    assert resolve_model("gpt2", ["name = my gpt"]).name == "my gpt"
    assert resolve_model("gpt2", ["n_layers=6", "n_layers=8"]).n_layers == 8  # last wins


def test_overrides_keep_derived_defaults():
    # gpt2 is multi-head: changing n_heads keeps it multi-head.
    spec = resolve_model("gpt2", ["n_heads=16"])
    assert (spec.n_heads, spec.n_kv_heads) == (16, 16)
    # llama-2-70b is GQA: n_kv_heads stays 8.
    assert resolve_model("llama-2-70b", ["n_heads=32"]).n_kv_heads == 8
    # mixtral's experts have width d_ff: they follow a new d_ff.
    assert resolve_model("mixtral-8x7b", ["d_ff=8192"]).d_ff_expert == 8192
    assert resolve_model("mixtral-8x7b", ["d_ff=8192", "d_ff_expert=1024"]).d_ff_expert == 1024


def test_overrides_on_a_config_path():
    spec = resolve_model(str(DATA / "llama-2-7b.json"), ["n_layers=16"])
    assert spec.n_layers == 16


def test_parse_overrides():
    assert parse_overrides(["n_layers=48", "bias=YES", "norm=rmsnorm"]) == {
        "n_layers": 48,
        "bias": True,
        "norm": "rmsnorm",
    }
    assert parse_overrides(["capacity_factor=1.25"]) == {"capacity_factor": 1.25}


def _err(arg: str, overrides: list[str] | None = None) -> SpecError:
    with pytest.raises(SpecError) as err:
        resolve_model(arg, overrides or [])
    return err.value


# (case, arg, overrides, words the message must contain)
BAD = [
    ("unknown preset", "gpt5", [], ["gpt5", "gpt2", "llama-2-7b", "dense:"]),
    ("dense negative", "dense:-5", [], ["dense:-5", "positive whole number"]),
    ("dense text", "dense:abc", [], ["dense:abc", "positive whole number"]),
    ("dense zero", "dense:0", [], ["dense:0", "positive whole number"]),
    ("dense fraction", "dense:1.5", [], ["dense:1.5", "positive whole number"]),
    ("dense empty", "dense:", [], ["dense:", "positive whole number"]),
    ("dense bytes", "dense:80GB", [], ["dense:80GB"]),
    ("no equals", "gpt2", ["n_layers"], ["--set", "n_layers", "field=value"]),
    (
        "unknown field",
        "gpt2",
        ["n_layer=4"],
        ["n_layer", "did you mean 'n_layers'?", "d_model", "vocab_size"],
    ),
    ("sources not settable", "gpt2", ["sources=x"], ["sources", "unknown field"]),
    ("bool maybe", "gpt2", ["bias=maybe"], ["bias", "maybe", "true or false"]),
    ("int x", "gpt2", ["n_layers=x"], ["n_layers", "'x'", "whole number"]),
    ("int fraction", "gpt2", ["n_layers=1.5"], ["n_layers", "1.5"]),
    ("int negative", "gpt2", ["d_model=-768"], ["d_model", "-768"]),
    ("int zero", "gpt2", ["n_layers=0"], ["n_layers", "positive"]),
    ("float x", "mixtral-8x7b", ["capacity_factor=x"], ["capacity_factor", "'x'", "number"]),
    ("float negative", "mixtral-8x7b", ["capacity_factor=-1"], ["capacity_factor", ">= 0"]),
    ("n_heads 7 on gpt2", "gpt2", ["n_heads=7"], ["n_heads", "d_model", "768"]),
    ("mlp relu", "gpt2", ["mlp=relu"], ["mlp", "relu", "gelu", "swiglu"]),
    ("kv heads", "llama-2-70b", ["n_kv_heads=3"], ["n_kv_heads", "3"]),
    ("overrides on dense", "dense:70B", ["n_layers=4"], ["--set", "dense:70B"]),
]


@pytest.mark.parametrize(("case", "arg", "overrides", "words"), BAD, ids=[b[0] for b in BAD])
def test_bad_inputs(case, arg, overrides, words):
    message = str(_err(arg, overrides))
    for word in words:
        assert word in message, (case, message)


def test_unknown_field_lists_every_field():
    err = _err("gpt2", ["colour=red"])
    assert err.field == "--set"
    for field in ("vocab_size", "n_kv_heads", "tied_embeddings", "experts_per_token", "name"):
        assert field in err.rule


def test_bad_config_file_via_resolve(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": "4096"}))
    err = _err(str(path))
    assert err.field == "config.json:hidden_size"


@pytest.mark.parametrize("name", ["pipe", "pipe.json"])
def test_a_named_pipe_is_refused_not_read(tmp_path, name):
    # reading a FIFO waits for a writer forever: the path is refused before it is opened
    pipe = tmp_path / name
    os.mkfifo(pipe)
    with pytest.raises(SpecError, match="not a regular file") as err:
        resolve_model(str(pipe))
    assert err.value.field == "model"


def test_a_folder_whose_config_is_a_pipe_is_refused(tmp_path):
    os.mkfifo(tmp_path / "config.json")
    with pytest.raises(SpecError, match=r"config\.json is not a regular file"):
        resolve_model(str(tmp_path))
