"""Cheapest cluster meeting a deadline: quotes, ordering, no-fit candidates, errors."""

from __future__ import annotations

import functools
import math

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.search.plan_space import PlannerResult, Policy
from trainbudget.core.parallel.search.planner_fast import search_fast as search
from trainbudget.core.parallel.search.procurement import Candidate, Quote, cheapest, quote
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset
from trainbudget.core.units import SECONDS_PER_DAY, SECONDS_PER_HOUR

BF16 = get_precision("bf16-mixed")
ADAMW = get_optimizer("adamw")
H100 = get_hardware("h100-sxm")
A100 = get_hardware("a100-80gb")
RTX = get_hardware("rtx-4090")
GPT2 = get_preset("gpt2")
L2_7B = get_preset("llama-2-7b")
# a small, fast search space: gpt2 at seq 1024, no cp, zero 0/1
POLICY = Policy(allow_cp=False, zero_stages=(0, 1), recompute=("none",))


def gpt2_search(cluster: Cluster) -> PlannerResult:
    return search(
        GPT2,
        cluster,
        global_batch=16,
        seq_len=1024,
        precision=BF16,
        optimizer=ADAMW,
        policy=POLICY,
    )


llama_search = functools.partial(
    search,
    L2_7B,
    global_batch=8,
    seq_len=4096,
    precision=BF16,
    optimizer=ADAMW,
    policy=Policy(allow_cp=False, recompute=("full",), max_micro_batch=1),
)

CANDIDATES = [
    Candidate(hardware=H100, n_gpus=8, price_per_gpu_hour=3.0),
    Candidate(hardware=H100, n_gpus=16, price_per_gpu_hour=3.0),
    Candidate(hardware=A100, n_gpus=8, price_per_gpu_hour=1.2),
    Candidate(hardware=A100, n_gpus=16, price_per_gpu_hour=1.2),
]
TOKENS = 1e10


def test_quote_arithmetic():
    c = CANDIDATES[0]
    result = gpt2_search(Cluster(hardware=H100, n_gpus=8))
    q = quote(c, TOKENS, 30, result)
    best = result.plans[0]
    seconds = TOKENS / best.time.tokens_per_second
    assert q.best is best
    assert q.days == pytest.approx(seconds / SECONDS_PER_DAY)
    # cost = GPU-hours x price = seconds / 3600 x 8 GPUs x 3.0
    assert q.cost == pytest.approx(seconds / SECONDS_PER_HOUR * 8 * 3.0)
    assert q.meets_deadline == (q.days <= 30)


def test_cheapest_picks_the_lowest_cost_meeting_the_deadline():
    quotes = cheapest(CANDIDATES, tokens=TOKENS, max_days=365, search=gpt2_search)
    assert len(quotes) == len(CANDIDATES)
    assert all(isinstance(q, Quote) for q in quotes)
    assert all(q.meets_deadline for q in quotes)  # a year is plenty for 10B gpt2 tokens
    costs = [q.cost for q in quotes]
    assert costs == sorted(costs)
    assert quotes[0].cost == min(q.cost for q in quotes)
    assert {(q.candidate.hardware.name, q.candidate.n_gpus) for q in quotes} == {
        (c.hardware.name, c.n_gpus) for c in CANDIDATES
    }


def test_deadline_excludes_slow_candidates():
    # put the deadline between the fastest and the slowest candidate
    loose = cheapest(CANDIDATES, tokens=TOKENS, max_days=365, search=gpt2_search)
    days = sorted(q.days for q in loose)
    deadline = (days[0] + days[-1]) / 2
    quotes = cheapest(CANDIDATES, tokens=TOKENS, max_days=deadline, search=gpt2_search)
    meets = [q for q in quotes if q.meets_deadline]
    misses = [q for q in quotes if not q.meets_deadline]
    assert meets and misses
    # those meeting the deadline come first, by cost; the rest after, by days
    assert quotes[: len(meets)] == meets
    assert [q.cost for q in meets] == sorted(q.cost for q in meets)
    assert [q.days for q in misses] == sorted(q.days for q in misses)
    assert all(q.days <= deadline for q in meets)
    assert all(q.days > deadline for q in misses)
    assert quotes[0].cost == min(q.cost for q in meets)


def test_when_none_meets_the_deadline_the_fastest_comes_first():
    quotes = cheapest(CANDIDATES, tokens=TOKENS, max_days=1e-9, search=gpt2_search)
    assert not any(q.meets_deadline for q in quotes)
    assert quotes[0].days == min(q.days for q in quotes)


def test_a_candidate_where_nothing_fits_costs_inf_and_sorts_last():
    # llama-2-7b: 6.7e9 x 16 bytes of model state cannot fit one 24 GB RTX 4090; it fits
    # 8 H100s (full recompute, micro-batch 1, ZeRO over 8 ranks)
    cands = [
        Candidate(hardware=RTX, n_gpus=1, price_per_gpu_hour=0.3),
        Candidate(hardware=H100, n_gpus=8, price_per_gpu_hour=3.0),
    ]
    quotes = cheapest(cands, tokens=1e9, max_days=1e6, search=llama_search)
    assert quotes[0].candidate.hardware is H100
    assert quotes[0].best is not None and quotes[0].meets_deadline
    last = quotes[-1]
    assert last.candidate.hardware is RTX
    assert last.best is None
    assert math.isinf(last.cost) and math.isinf(last.days)
    assert not last.meets_deadline


def test_all_candidates_unfit():
    cands = [
        Candidate(hardware=RTX, n_gpus=1, price_per_gpu_hour=0.3),
        Candidate(hardware=RTX, n_gpus=1, price_per_gpu_hour=0.1),
    ]
    quotes = cheapest(cands, tokens=1e9, max_days=10, search=llama_search)
    assert all(q.best is None and math.isinf(q.cost) for q in quotes)


def test_search_is_called_with_the_candidate_cluster():
    seen = []

    def spy(cluster: Cluster) -> PlannerResult:
        seen.append((cluster.hardware.name, cluster.n_gpus))
        return gpt2_search(cluster)

    cheapest(CANDIDATES[:2], tokens=TOKENS, max_days=30, search=spy)
    assert seen == [("h100-sxm", 8), ("h100-sxm", 16)]


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"tokens": 0, "max_days": 30}, "tokens"),
        ({"tokens": -1e9, "max_days": 30}, "tokens"),
        ({"tokens": 1e9, "max_days": 0}, "within_days"),
        ({"tokens": 1e9, "max_days": -1}, "within_days"),
    ],
)
def test_errors(kw, field):
    with pytest.raises(SpecError) as info:
        cheapest(CANDIDATES, search=gpt2_search, **kw)
    assert info.value.field == field


def test_empty_candidates():
    with pytest.raises(SpecError) as info:
        cheapest([], tokens=1e9, max_days=30, search=gpt2_search)
    assert info.value.field == "gpu_counts"
