"""Properties of plan memory, step time and the planner over random models and layouts.

Memory monotonicity (each derived in the test's docstring from parallel_memory.py):
- ZeRO stage 0 -> 1 -> 2 -> 3 never increases memory per GPU, for models with >= 4 layers per
  stage and dp >= 4. Why the restriction: ZeRO-3 trades the 2 x 25 MB DDP buckets for
  gathered-layer buffers of one layer's weights twice (in use + prefetched) plus its unsharded
  gradient, layer x (2w + g) bytes, while sharding the weights saves P x w x (N - 1) / N. With
  P >= 4 layers (a stage holds >= 4 of them) and N >= 4, the saving is >= 4 x layer x w x 3/4
  = 3w x layer >= (2w + g) x layer whenever g <= w (true for every precision policy). A 1-layer
  model on dp 2 saves only ~P x w / 2 but gathers 3 layers' worth (e.g. one 30M-parameter layer:
  +180 MB of buffers - 50 MB of buckets vs 30 MB saved): memory goes up.
- TP 1 -> 2 -> 4 -> 8 at fixed dp/pp/micro-batch: every term is split by tp or replicated.
- PP 1 -> 2 -> 4 at fixed dp/tp, 1F1B, m >= pp: a stage holds L / pp layers and min(m, pp)
  micro-batches of them, so the first stage's L / pp x pp = L layer-activations never exceed
  the single stage's L (which also keeps the logits); the last stage keeps one micro-batch.
  What a pipeline adds is the schedule's own (torch 2.13 pipelining, measured in
  tests/train/observe/test_rank_memory.py): per micro-batch a receive buffer, a sent gradient, the
  output kept to merge and the received input's gradient (tokens x d each), a block's MLP
  gradients in backward, and under recomputation the layer rebuilt inside each backward. So
  the peak never grows by more than those (`pipeline_overhead_bytes`); on small models whose
  activations dominate it can grow by that much.

Planner: search() returns a valid plan that fits, and (brute force over enumerate_plans) no
fitting plan is faster per token.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.fits import allocated_limit_bytes, n_communicators, rule_for
from trainbudget.core.parallel.memory.gpu_memory import plan_memory
from trainbudget.core.parallel.plan import Plan, validate_plan
from trainbudget.core.parallel.search.plan_grid import enumerate_plans
from trainbudget.core.parallel.search.plan_space import TIE_TOLERANCE, Policy
from trainbudget.core.parallel.search.planner import evaluate
from trainbudget.core.parallel.search.planner_fast import search_fast as search
from trainbudget.core.single.activations import layer_activations
from trainbudget.core.spec.frameworks import GENERIC
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_optimizer, get_precision

SETTINGS = settings(max_examples=100, deadline=None, derandomize=True)
PLANNER_SETTINGS = settings(max_examples=15, deadline=None, derandomize=True)
H100 = get_hardware("h100-sxm")
EPS = 1e-9  # relative tolerance for float sums
BF16 = get_precision("bf16-mixed")
ADAMW = get_optimizer("adamw")

precisions = st.sampled_from(["bf16-mixed", "fp32", "bf16", "fp16-mixed"]).map(get_precision)
optimizers = st.sampled_from(["adamw", "sgd", "adamw-8bit", "momentum"]).map(get_optimizer)


@st.composite
def specs(draw: st.DrawFn, *, min_layers: int = 1, layers_multiple: int = 1) -> ModelSpec:
    """A valid spec whose head count is a multiple of 8 (tp up to 8) and whose kv-head count
    is a power of two dividing it (so every power-of-two tp and the kv heads divide one
    another)."""
    n_heads = 8 * draw(st.integers(1, 3))
    n_kv = draw(st.sampled_from([k for k in (1, 2, 4, 8) if n_heads % k == 0]))
    d_head = draw(st.sampled_from([16, 32, 64, 128]))
    d_model = n_heads * d_head
    n_layers = layers_multiple * draw(st.integers(max(1, -(-min_layers // layers_multiple)), 8))
    kw: dict = dict(
        vocab_size=draw(st.integers(256, 64_000)),
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        d_ff=d_model * draw(st.integers(1, 4)),
        max_seq_len=4096,
        mlp=draw(st.sampled_from(["gelu", "swiglu"])),
        norm=draw(st.sampled_from(["layernorm", "rmsnorm"])),
        position=draw(st.sampled_from(["learned", "rope"])),
        tied_embeddings=draw(st.booleans()),
        bias=draw(st.booleans()),
    )
    if draw(st.integers(0, 3)) == 0:
        n_experts = draw(st.sampled_from([2, 4, 8]))
        kw.update(n_experts=n_experts, experts_per_token=draw(st.integers(1, 2)))
    return ModelSpec(**kw)


seq_lens = st.sampled_from([128, 512, 1024, 2048, 4096])
recomputes = st.sampled_from(["none", "selective", "full"])


def total(spec, plan, seq_len, precision, optimizer) -> float:
    return plan_memory(
        spec, plan, seq_len=seq_len, precision=precision, optimizer=optimizer
    ).total_bytes


# ---- memory monotonicity --------------------------------------------------------------------
@SETTINGS
@given(
    spec=specs(min_layers=4, layers_multiple=2),
    seq_len=seq_lens,
    dp=st.sampled_from([4, 8, 16, 64]),
    tp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2]),
    m=st.integers(1, 8),
    mb=st.integers(1, 4),
    recompute=recomputes,
    flash=st.booleans(),
    precision=precisions,
    optimizer=optimizers,
)
def test_memory_never_grows_with_zero_stage(
    spec, seq_len, dp, tp, pp, m, mb, recompute, flash, precision, optimizer
):
    # the derivation needs >= 4 layers on every stage: fall back to one stage otherwise
    if spec.n_layers // pp < 4:
        pp = 1
    mems = [
        total(
            spec,
            Plan(
                dp=dp,
                tp=tp,
                pp=pp,
                zero=z,
                grad_accum=m,
                micro_batch=mb,
                recompute=recompute,
                flash_attention=flash,
            ),
            seq_len,
            precision,
            optimizer,
        )
        for z in (0, 1, 2, 3)
    ]
    for a, b in itertools.pairwise(mems):
        assert b <= a * (1 + EPS), mems


def test_why_the_zero3_property_needs_layers_and_dp():
    # one 50M-parameter layer (d 2048: 4 d^2 attention + 2 x 2048 x 8192 GELU MLP), tiny vocab,
    # dp 2: ZeRO-3 saves ~2 bytes x 50M / 2 = 50 MB of weights but gathers 6 bytes x 50M =
    # 300 MB of layer buffers in place of 50 MB of DDP buckets: memory goes UP by ~200 MB
    spec = ModelSpec(
        vocab_size=256, d_model=2048, n_layers=1, n_heads=16, d_ff=8192, max_seq_len=512
    )
    z2 = total(spec, Plan(dp=2, zero=2), 512, BF16, ADAMW)
    z3 = total(spec, Plan(dp=2, zero=3), 512, BF16, ADAMW)
    assert z3 > z2 + 150e6


@SETTINGS
@given(
    spec=specs(),
    seq_len=seq_lens,
    dp=st.sampled_from([1, 2, 8]),
    pp=st.sampled_from([1, 2]),
    zero=st.sampled_from([0, 1, 2, 3]),
    m=st.integers(1, 8),
    mb=st.integers(1, 4),
    recompute=recomputes,
    flash=st.booleans(),
    precision=precisions,
    optimizer=optimizers,
    sp=st.booleans(),
)
def test_memory_never_grows_with_tp(
    spec, seq_len, dp, pp, zero, m, mb, recompute, flash, precision, optimizer, sp
):
    if spec.n_layers % pp:
        pp = 1
    zero = zero if dp > 1 else 0
    # sp needs tp > 1: with sp the chain starts at tp 2
    degrees = (2, 4, 8) if sp else (1, 2, 4, 8)
    mems = []
    for tp in degrees:
        plan = Plan(
            dp=dp,
            tp=tp,
            pp=pp,
            zero=zero,
            sp=sp,
            grad_accum=m,
            micro_batch=mb,
            recompute=recompute,
            flash_attention=flash,
        )
        validate_plan(plan, spec, n_gpus=plan.n_gpus, seq_len=seq_len)
        mems.append(total(spec, plan, seq_len, precision, optimizer))
    for a, b in itertools.pairwise(mems):
        assert b <= a * (1 + EPS), mems


@SETTINGS
@given(
    spec=specs(layers_multiple=4),
    seq_len=seq_lens,
    dp=st.sampled_from([1, 2, 8]),
    tp=st.sampled_from([1, 2, 8]),
    zero=st.sampled_from([0, 1, 2, 3]),
    extra_m=st.integers(0, 8),
    mb=st.integers(1, 4),
    recompute=recomputes,
    flash=st.booleans(),
    precision=precisions,
    optimizer=optimizers,
)
def test_memory_never_grows_with_pp(
    spec, seq_len, dp, tp, zero, extra_m, mb, recompute, flash, precision, optimizer
):
    zero = zero if dp > 1 else 0
    m = 4 + extra_m  # m >= pp for every pp in the chain
    mems = []
    for pp in (1, 2, 4):
        plan = Plan(
            dp=dp,
            tp=tp,
            pp=pp,
            zero=zero,
            grad_accum=m,
            micro_batch=mb,
            recompute=recompute,
            flash_attention=flash,
        )
        validate_plan(plan, spec, n_gpus=plan.n_gpus, seq_len=seq_len)
        mems.append(total(spec, plan, seq_len, precision, optimizer))
    extra = pipeline_overhead_bytes(spec, plan, seq_len, precision)
    for a, b in itertools.pairwise(mems):
        assert b <= a * (1 + EPS) + extra, mems


def pipeline_overhead_bytes(spec, plan: Plan, seq_len: int, precision) -> float:
    """The most a pipeline's schedule adds on a stage (module docstring): four tokens x d
    tensors a micro-batch, a block's two MLP gradients and one layer's saved tensors."""
    tokens = seq_len * plan.micro_batch
    e, g = precision.activation_bytes, precision.grad_bytes
    layer = layer_activations(
        spec,
        seq_len=seq_len,
        micro_batch=plan.micro_batch,
        activation_bytes=e,
        flash_attention=plan.flash_attention,
        tp=plan.tp,
    ).total_bytes
    boundary = plan.grad_accum * tokens * spec.d_model * (2 * e + 2 * g)
    return boundary + 2 * tokens * spec.d_ff * g + layer + 2 * tokens * 8


@SETTINGS
@given(
    spec=specs(),
    seq_len=seq_lens,
    tp=st.sampled_from([2, 4, 8]),
    dp=st.sampled_from([1, 4]),
    recompute=recomputes,
    precision=precisions,
)
def test_sequence_parallel_never_costs_memory(spec, seq_len, tp, dp, recompute, precision):
    adamw = get_optimizer("adamw")
    kw = dict(dp=dp, tp=tp, grad_accum=2, recompute=recompute)
    without = total(spec, Plan(**kw), seq_len, precision, adamw)
    with_sp = total(spec, Plan(sp=True, **kw), seq_len, precision, adamw)
    assert with_sp <= without * (1 + EPS)


# ---- planner ----------------------------------------------------------------------------------
@st.composite
def planner_cases(draw: st.DrawFn):
    spec = draw(specs())
    n_gpus = draw(st.sampled_from([8, 16]))
    # a multiple of the GPU count: dp = n_gpus with tp = pp = cp = 1 is always a layout
    global_batch = n_gpus * draw(st.integers(1, 3))
    seq_len = draw(st.sampled_from([128, 256, 1024]))
    policy = Policy(
        allow_cp=draw(st.booleans()),
        max_micro_batch=draw(st.sampled_from([1, 4])),
        flash_attention=draw(st.booleans()),
        max_vpp=2,
    )
    return spec, n_gpus, global_batch, seq_len, policy


@PLANNER_SETTINGS
@given(case=planner_cases())
def test_search_returns_the_fastest_fitting_valid_plan(case):
    spec, n_gpus, global_batch, seq_len, policy = case
    cluster = Cluster(hardware=H100, n_gpus=n_gpus)
    result = search(
        spec,
        cluster,
        global_batch=global_batch,
        seq_len=seq_len,
        precision=BF16,
        optimizer=ADAMW,
        policy=policy,
    )
    best = result.plans[0]
    validate_plan(best.plan, spec, n_gpus=n_gpus, seq_len=seq_len, global_batch=global_batch)
    assert best.fits
    p, rule = best.plan, rule_for(policy.memory_headroom, GENERIC.name)
    limit = allocated_limit_bytes(
        H100.usable_memory_bytes, rule, n_communicators(p.dp, p.tp, p.pp, p.cp)
    )
    assert best.memory.total_bytes <= limit

    # brute force: evaluate every enumerated plan ourselves
    fitting = []
    n = 0
    for plan in enumerate_plans(
        spec, cluster, global_batch=global_batch, seq_len=seq_len, policy=policy
    ):
        n += 1
        r = evaluate(
            spec,
            plan,
            cluster,
            seq_len=seq_len,
            precision=BF16,
            optimizer=ADAMW,
            headroom=policy.memory_headroom,
        )
        t = r.time
        # structure of every evaluated plan
        assert abs(sum(t.breakdown_seconds.values()) - t.step_seconds) <= EPS * t.step_seconds
        assert t.lower_bound_seconds <= t.step_seconds * (1 + EPS)
        assert t.step_seconds <= t.upper_bound_seconds * (1 + EPS)
        assert 0 < t.mfu <= t.hfu * (1 + EPS) and t.hfu <= 1
        if r.fits:
            fitting.append(r)
    assert n == result.evaluated
    assert len(fitting) == result.n_fitting
    # the fastest, up to the planner's tie tolerance (ties go to the simpler layout)
    assert all(best.seconds_per_token <= r.seconds_per_token * (1 + TIE_TOLERANCE) for r in fitting)
