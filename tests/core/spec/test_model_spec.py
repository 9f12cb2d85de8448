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


# ---- fields of current open models ---------------------------------------------------------

# DeepSeek-V3-like MLA on the GPT-2 base: 12 heads of 64 + 32 rotary, values 64 wide.
MLA = dict(
    head_dim=96,
    kv_lora_rank=64,
    q_lora_rank=96,
    rope_head_dim=32,
    v_head_dim=64,
    position="rope",
    norm="rmsnorm",
)


def test_explicit_head_dim_frees_n_heads_from_d_model() -> None:
    s = spec(n_heads=5, head_dim=128)  # 768 % 5 != 0 is fine with an explicit width
    assert (s.d_head, s.d_q, s.d_kv, s.d_attn_out) == (128, 640, 640, 640)
    assert spec(n_heads=16).d_head == 48  # head_dim 0 follows d_model / n_heads


def test_mla_derived_widths() -> None:
    s = spec(**MLA)
    assert s.is_mla and (s.d_head, s.d_v_head, s.d_rope) == (96, 64, 32)
    assert (s.d_q, s.d_kv, s.d_v, s.d_attn_out) == (1152, 1152, 768, 768)


def test_layer_kinds() -> None:
    s = spec(sliding_window=128, global_every=3)
    assert [s.is_sliding_layer(i) for i in range(6)] == [True, True, False] * 2
    assert s.n_sliding_layers == 8  # 12 layers, every 3rd global
    assert spec(sliding_window=128).n_sliding_layers == 12  # global_every 0: all slide
    moe = spec(n_experts=4, experts_per_token=1, n_dense_layers=2)
    assert moe.n_moe_layers == 10
    assert [moe.is_moe_layer(i) for i in range(3)] == [False, False, True]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"head_dim": -1}, "head_dim"),
        ({"sliding_window": True}, "sliding_window"),
        ({"global_every": 2}, "global_every"),  # every layer is already global
        ({"qk_norm": 1}, "qk_norm"),
        ({"gate_activation": "relu"}, "gate_activation"),
        ({"gate_activation": "gelu_tanh"}, "gate_activation"),  # GELU MLP has no gate
        ({"q_lora_rank": 32}, "q_lora_rank"),  # an MLA field without kv_lora_rank
        ({"v_head_dim": 32}, "v_head_dim"),
        ({**MLA, "rope_head_dim": 0}, "rope_head_dim"),
        ({**MLA, "rope_head_dim": 96}, "rope_head_dim"),  # the whole head rotary
        ({**MLA, "rope_head_dim": 31}, "rope_head_dim"),  # RoPE rotates pairs
        ({**MLA, "n_kv_heads": 4}, "n_kv_heads"),
        ({**MLA, "position": "learned"}, "position"),
        ({**MLA, "bias": True}, "bias"),
        ({**MLA, "qk_norm": True}, "qk_norm"),
        ({"n_dense_layers": 1}, "n_experts"),  # dense layers on a dense model
        ({"router_bias": True}, "n_experts"),
        ({"capacity_factor": 1.25}, "capacity_factor"),  # no experts to cap
        ({"n_experts": 4, "experts_per_token": 1, "capacity_factor": -1.0}, "capacity_factor"),
        ({"n_experts": 4, "experts_per_token": 1, "capacity_factor": "1.25"}, "capacity_factor"),
        (
            {"n_experts": 4, "experts_per_token": 1, "capacity_factor": float("inf")},
            "capacity_factor",
        ),
        ({"n_experts": 4, "experts_per_token": 1, "n_dense_layers": 12}, "n_dense_layers"),
    ],
)
def test_new_fields_validated(changes: dict, field: str) -> None:
    assert field_of(**changes) == field
