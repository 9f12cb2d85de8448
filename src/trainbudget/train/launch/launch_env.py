"""Where this process stands in a multi-process run, read from the environment torchrun (or a
hand-made launch) sets, and checked for consistency before any process group starts: a bad
combination is a one-line error naming the variable, its value and the rule, never a KeyError
or a rendezvous that waits for a rank that cannot come.

Pure Python (no torch). torchrun sets, per worker: RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE (its processes on this node), GROUP_WORLD_SIZE (the nodes), ROLE_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_RUN_ID and
TORCHELASTIC_USE_AGENT_STORE (its agent hosts the store at MASTER_ADDR:MASTER_PORT). A launch by
hand sets at least WORLD_SIZE, RANK, MASTER_ADDR and MASTER_PORT; rank 0 then hosts the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trainbudget.core.errors import SpecError

UNSET = "(unset)"


@dataclass(frozen=True, kw_only=True)
class LaunchEnv:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    master_addr: str = ""
    """Where the ranks meet (the store's host); empty when running alone."""
    master_port: int = 0
    agent_store: bool = False
    """torchrun's agent hosts the store (every rank is its client); else rank 0 hosts it."""
    attempt: int = 0
    """torchrun's restart count (TORCHELASTIC_RESTART_COUNT): each attempt meets apart."""


def read_launch_env(environ: Mapping[str, str]) -> LaunchEnv:
    """The launch `environ` describes; a SpecError for the first inconsistency."""
    if "WORLD_SIZE" not in environ:
        rank = environ.get("RANK", "0")
        if rank.strip() != "0":
            raise SpecError(
                "RANK", rank, "is set but WORLD_SIZE is not: set both (torchrun does) or neither"
            )
        return LaunchEnv()
    world = _integer(environ, "WORLD_SIZE", low=1)
    if "RANK" not in environ:
        raise SpecError(
            "RANK",
            UNSET,
            f"must be set with WORLD_SIZE ({world}): each process needs its rank in "
            f"[0, {world}) (torchrun sets both)",
        )
    rank = _integer(environ, "RANK", low=0)
    if rank >= world:
        raise SpecError("RANK", rank, f"must be less than WORLD_SIZE ({world})")
    local_rank = _integer(environ, "LOCAL_RANK", low=0, default=0)
    _check_torchrun_sizes(environ, world, local_rank)
    if world == 1:
        return LaunchEnv()
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not environ.get(name, "").strip():
            raise SpecError(
                name,
                UNSET,
                f"must be set with WORLD_SIZE ({world}) > 1: the ranks meet at "
                "MASTER_ADDR:MASTER_PORT (torchrun sets both)",
            )
    return LaunchEnv(
        rank=rank,
        local_rank=local_rank,
        world_size=world,
        master_addr=environ["MASTER_ADDR"].strip(),
        master_port=_integer(environ, "MASTER_PORT", low=1, high=65535),
        agent_store=environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
        attempt=_integer(environ, "TORCHELASTIC_RESTART_COUNT", low=0, default=0),
    )


def _check_torchrun_sizes(environ: Mapping[str, str], world: int, local_rank: int) -> None:
    """LOCAL_WORLD_SIZE, GROUP_WORLD_SIZE and ROLE_WORLD_SIZE (torchrun's) against WORLD_SIZE:
    a WORLD_SIZE that disagrees with the processes torchrun started would wait for ranks that
    never come (more) or train ranks alone into a shared folder (fewer)."""
    if "LOCAL_WORLD_SIZE" in environ:
        local_world = _integer(environ, "LOCAL_WORLD_SIZE", low=1)
        if local_world > world:
            raise SpecError(
                "LOCAL_WORLD_SIZE",
                local_world,
                f"must not exceed WORLD_SIZE ({world}): the processes on this node are ranks "
                "of the run",
            )
        if local_rank >= local_world:
            raise SpecError(
                "LOCAL_RANK", local_rank, f"must be less than LOCAL_WORLD_SIZE ({local_world})"
            )
        if "GROUP_WORLD_SIZE" in environ:
            nodes = _integer(environ, "GROUP_WORLD_SIZE", low=1)
            if nodes == 1 and local_world != world:
                raise SpecError(
                    "WORLD_SIZE",
                    world,
                    f"must equal LOCAL_WORLD_SIZE ({local_world}) on one node "
                    "(GROUP_WORLD_SIZE 1): torchrun started that many processes",
                )
    if "ROLE_WORLD_SIZE" in environ:
        role_world = _integer(environ, "ROLE_WORLD_SIZE", low=1)
        if role_world != world:
            raise SpecError(
                "WORLD_SIZE", world, f"must equal torchrun's ROLE_WORLD_SIZE ({role_world})"
            )


def _integer(
    environ: Mapping[str, str],
    name: str,
    *,
    low: int,
    high: int | None = None,
    default: int | None = None,
) -> int:
    text = environ.get(name)
    if text is None and default is not None:
        return default
    bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
    try:
        value = int(str(text).strip())
    except ValueError:
        raise SpecError(name, text, f"must be an integer {bound}") from None
    if value < low or (high is not None and value > high):
        raise SpecError(name, value, f"must be an integer {bound}")
    return value
