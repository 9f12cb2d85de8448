"""What the planner searches and what it returns, in plain numbers: the search policy, the
degrees each parallel axis may take, the tie-break keys, and the ranked results.

Both the grid search (`planner_fast`, numpy) and the one-plan evaluation (`planner`) import
this module; it imports neither, so imports run one way: plan_space <- planner <- planner_fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from math import isqrt
from typing import TYPE_CHECKING

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.spec.defaults import DEFAULT_FLASH_ATTENTION, DEFAULT_MEMORY_HEADROOM
from trainbudget.core.spec.model_spec import ModelSpec

if TYPE_CHECKING:  # RankedPlan's field types, named only: nothing here runs those models
    from trainbudget.core.parallel.memory.gpu_memory import PlanMemory
    from trainbudget.core.parallel.timing.step_time import StepTime


@dataclass(frozen=True, kw_only=True)
class Policy:
    """What the search may use. Defaults follow common practice; each is a knob."""

    max_tp: int = 0
    """Largest TP degree; 0 = GPUs per node (TP across nodes is rarely worth it)."""
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    recompute: tuple[str, ...] = ("none", "selective", "full")
    allow_offload: bool = False
    allow_cp: bool = True
    max_vpp: int = 4
    max_micro_batch: int = 16
    flash_attention: bool = DEFAULT_FLASH_ATTENTION
    """Plans use FlashAttention (every modern stack does); False searches the unfused kernel."""
    memory_headroom: float | None = DEFAULT_MEMORY_HEADROOM
    """Fraction of the device's memory a plan's allocated peak may use (the flat fits rule,
    --memory-headroom); None, the default, decides by the device rule (core.parallel.fits)."""
    hsdp: bool = True
    """Also try ZeRO over shard groups smaller than dp (HSDP), `hsdp_shards` sizes."""


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending: those up to sqrt(n), then their co-divisors (sqrt(n)
    trial divisions, not n: dp and the global batch reach the thousands)."""
    return list(_divisors(n))


@cache
def _divisors(n: int) -> tuple[int, ...]:
    """divisors(n), kept: a search asks for the same few data-parallel degrees once per row."""
    low = [d for d in range(1, isqrt(n) + 1) if n % d == 0]
    return (*low, *(n // d for d in reversed(low) if d * d != n))


def _powers_of_two_dividing(n: int, cap: int) -> list[int]:
    out, d = [], 1
    while d <= cap and n % d == 0:
        out.append(d)
        d *= 2
    return out


def hsdp_shards(dp: int, tp: int, cp: int, gpus_per_node: int) -> list[int]:
    """HSDP shard sizes (in dp ranks) worth trying for a dp group: the dp ranks one node holds
    (g // (tp * cp)) and every multiple of it that divides dp, short of dp itself (that is full
    sharding, zero_shard 0); never a group of one GPU, which shards nothing."""
    node = max(1, gpus_per_node // (tp * cp))
    return [s for s in _divisors(dp) if s % node == 0 and s < dp and s * cp > 1]


def axis_candidates(
    spec: ModelSpec, cluster: Cluster, *, seq_len: int, policy: Policy
) -> tuple[list[int], list[int], list[int]]:
    """The TP, PP and CP degrees validate_plan can accept for this model and cluster."""
    n = cluster.n_gpus
    max_tp = policy.max_tp or cluster.gpus_per_node
    tps = [
        t
        for t in divisors(spec.n_heads)
        if t <= max_tp
        and t <= spec.vocab_size
        and n % t == 0
        and (spec.n_kv_heads % t == 0 or t % spec.n_kv_heads == 0)
    ]
    pps = [p for p in divisors(spec.n_layers) if n % p == 0]
    cps = [1]
    if policy.allow_cp:
        cps = [c for c in _powers_of_two_dividing(seq_len, n) if c == 1 or seq_len % (2 * c) == 0]
    return tps, pps, cps


TIE_TOLERANCE = 1e-3
"""Plans within 0.1 % of the fastest time per token tie: far below the step model's own error
on published runs (docs/validation.md), so the planner prefers the simpler layout among them."""


def parallel_axes(plan):
    """Model-parallel axes a layout uses beyond data parallelism (tp, pp, virtual stages, cp,
    ep, an HSDP shard group): the planner's tie-break, fewer first. One plan (a Plan, ints) or
    a grid of plans (PlanNumbers of arrays): the same arithmetic."""
    return (
        (plan.tp > 1) * 1
        + (plan.pp > 1)
        + (plan.vpp > 1)
        + (plan.cp > 1)
        + (plan.ep > 1)
        + (plan.zero_shard > 0)
    )


def model_parallel_degree(plan):
    """GPUs one model replica spans (tp x pp x cp x ep): the second tie-break, smaller first
    (fewer GPUs in each collective outside data parallelism). Numbers or arrays."""
    return plan.tp * plan.pp * plan.cp * plan.ep


@dataclass(frozen=True, kw_only=True)
class RankedPlan:
    plan: Plan
    memory: PlanMemory
    time: StepTime
    fits: bool
    stage_memory_bytes: dict[str, float] = field(default_factory=dict)
    """Peak bytes per GPU of each pipeline stage ('first', 'middle', 'last', or 'only')."""
    stage_peak_phases: dict[str, str] = field(default_factory=dict)
    """The phase of the step at which each stage's GPU peaks (core.parallel.memory.gpu_peak)."""

    @property
    def seconds_per_token(self) -> float:
        return self.time.step_seconds / self.time.tokens_per_step


@dataclass(frozen=True, kw_only=True)
class PlannerResult:
    plans: tuple[RankedPlan, ...]
    """Best first; fitting plans only (unless none fits: then the smallest-memory ones)."""
    evaluated: int
    n_fitting: int
    search_seconds: float
