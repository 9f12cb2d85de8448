"""ModelSpec / BareModel validation: every rule raises a SpecError naming the offending field."""

from __future__ import annotations

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.model_spec import BareModel, ModelSpec

# GPT-2 small (Radford et al. 2019; HF gpt2 config.json): the valid base every case edits.
GPT2 = dict(vocab_size=50257, d_model=768, n_layers=12, n_heads=12, d_ff=3072, max_seq_len=1024)


def spec(**changes: object) -> ModelSpec:
    return ModelSpec(**{**GPT2, **changes})


def field_of(**changes: object) -> str:
    with pytest.raises(SpecError) as err:
        spec(**changes)
    return err.value.field


def test_valid_gpt2_derived_dims() -> None:
    """d_head = d_model / n_heads; MHA means d_kv = d_model."""
    s = spec()
    assert s.d_head == 64  # 768 / 12
    assert s.d_kv == 768  # 12 kv heads x 64
    assert not s.is_moe


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"n_heads": 5}, "n_heads"),  # 768 % 5 = 3
        ({"n_kv_heads": 5}, "n_kv_heads"),  # 12 % 5 = 2
        ({"n_kv_heads": 24}, "n_kv_heads"),  # more kv heads than query heads
        ({"d_model": 0}, "d_model"),
        ({"n_layers": -1}, "n_layers"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"d_ff": -4}, "d_ff"),
        ({"max_seq_len": 0}, "max_seq_len"),
        ({"n_kv_heads": -2}, "n_kv_heads"),
        ({"n_experts": -1}, "n_experts"),
        ({"d_model": True}, "d_model"),  # a bool is not an int here
        ({"n_layers": 12.0}, "n_layers"),  # neither is a float
        ({"n_shared_experts": False}, "n_shared_experts"),
        ({"tied_embeddings": 1}, "tied_embeddings"),  # and an int is not a bool
        ({"bias": "yes"}, "bias"),
        ({"mlp": "relu"}, "mlp"),
        ({"norm": "batchnorm"}, "norm"),
        ({"position": "sinusoidal"}, "position"),  # a real scheme, not modelled
    ],
)
def test_invalid_fields_named(changes: dict, field: str) -> None:
    """Each broken rule reports the field that broke it."""
    assert field_of(**changes) == field


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"experts_per_token": 2}, "n_experts"),  # top-k set on a dense model
        ({"n_shared_experts": 1}, "n_experts"),  # shared experts on a dense model
        ({"n_experts": 8}, "experts_per_token"),  # MoE without top-k
        ({"n_experts": 8, "experts_per_token": 9}, "experts_per_token"),  # k > n_experts
    ],
)
def test_moe_inconsistencies(changes: dict, field: str) -> None:
    """Dense and MoE fields must agree."""
    assert field_of(**changes) == field


def test_n_kv_heads_zero_means_mha() -> None:
    """n_kv_heads=0 is replaced by n_heads."""
    assert spec(n_kv_heads=0).n_kv_heads == 12
    assert spec(n_kv_heads=4).d_kv == 256  # 4 kv heads x d_head 64


def test_d_ff_expert_defaults_to_d_ff() -> None:
    """An MoE spec without d_ff_expert uses d_ff; a dense spec leaves it 0."""
    assert spec(n_experts=8, experts_per_token=2).d_ff_expert == 3072
    assert spec(n_experts=8, experts_per_token=2, d_ff_expert=512).d_ff_expert == 512
    assert spec().d_ff_expert == 0


def test_replace_revalidates() -> None:
    """replace() builds a new spec through the same validation."""
    s = spec()
    assert s.replace(n_layers=24).n_layers == 24
    with pytest.raises(SpecError) as err:
        s.replace(n_heads=7)
    assert err.value.field == "n_heads"
    assert s.n_heads == 12  # the original is untouched (frozen)


def test_replace_keeps_materialised_n_kv_heads() -> None:
    """n_kv_heads was filled in at construction, so changing n_heads alone does not re-default
    it (model_arg resets it to 0 for --set); passing n_kv_heads=0 does."""
    s = spec()
    with pytest.raises(SpecError) as err:
        s.replace(n_heads=16, d_model=1024)  # 16 % 12 != 0
    assert err.value.field == "n_kv_heads"
    assert s.replace(n_heads=16, d_model=1024, n_kv_heads=0).n_kv_heads == 16


@pytest.mark.parametrize("bad", ["8", None])
def test_non_int_n_experts_is_spec_error(bad: object) -> None:
    """A wrongly typed n_experts must name its field like every other int field."""
    assert field_of(n_experts=bad) == "n_experts"


def test_sources_not_compared() -> None:
    """sources are provenance only: two specs differing only in sources are equal."""
    assert spec(sources=("a",)) == spec(sources=("b",))


@pytest.mark.parametrize("bad", [0, -5, True, 7.0e9, "70B"])
def test_bare_model_validation(bad: object) -> None:
    """A BareModel needs a positive int parameter count."""
    with pytest.raises(SpecError) as err:
        BareModel(n_params=bad)
    assert err.value.field == "n_params"


def test_bare_model_ok() -> None:
    """A positive int count is accepted as is."""
    assert BareModel(n_params=70_000_000_000).n_params == 70_000_000_000
