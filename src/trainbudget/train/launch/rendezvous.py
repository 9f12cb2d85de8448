"""Joining the process group with every wait bounded by --collective-timeout-seconds.

1. The store: rank 0 hosts a TCPStore at MASTER_ADDR:MASTER_PORT (torchrun's agent hosts it
   instead when TORCHELASTIC_USE_AGENT_STORE is true); the others poll that address with plain
   socket connections until it answers, so a missing rank 0 is a one-line error rather than
   the TCPStore client's C++ traces, and Ctrl-C is served between polls.
2. Arrival: each rank leaves its mark (train.launch.collective_watch) and polls the store until
   every rank's is there; at the deadline the ranks without one are named (WORLD_SIZE=3 given to 2
   processes: "rank 2 of WORLD_SIZE 3 did not arrive").
3. The process group, over the same store, with `timeout`: gloo applies it to every collective.

Keys live under a prefix per torchrun attempt: restarted workers meet apart from the dead
ones' keys (gloo would otherwise find the dead ranks' addresses: "connectFullMesh failed ...
Connection refused").
"""

from __future__ import annotations

import datetime
import socket
import time

import torch.distributed as dist

from trainbudget.core.errors import SpecError
from trainbudget.train.launch.collective_watch import Watch, mark_key
from trainbudget.train.launch.exits import RanksLost, ranks_text
from trainbudget.train.launch.launch_env import LaunchEnv

POLL_SECONDS = 0.1
MISSING_KEY = "rendezvous/missing"
"""Posted by the store's host when it gives up: the ranks that did not arrive."""
LEFT_KEY = "rendezvous/left"
HOST_LINGER_SECONDS = 5.0
"""How long the host keeps the store up for the others to read MISSING_KEY."""


def join(env: LaunchEnv, backend: str, timeout_seconds: float) -> Watch:
    """Meet the other ranks and start the process group; the run's Watch over the store."""
    timeout = datetime.timedelta(seconds=timeout_seconds)
    deadline = time.monotonic() + timeout_seconds
    store = dist.PrefixStore(f"trainbudget/attempt-{env.attempt}", _store(env, timeout, deadline))
    store.set(mark_key(env.rank), "0\trendezvous")
    _wait_for_everyone(store, env, timeout_seconds, deadline)
    dist.init_process_group(
        backend,
        store=dist.PrefixStore("pg", store),
        rank=env.rank,
        world_size=env.world_size,
        timeout=timeout,
    )
    host = "torchrun's agent" if env.agent_store else "rank 0"
    return Watch(
        store,
        rank=env.rank,
        world_size=env.world_size,
        timeout_seconds=timeout_seconds,
        host=host,
    )


def _store(env: LaunchEnv, timeout: datetime.timedelta, deadline: float):
    address = f"{env.master_addr}:{env.master_port}"
    hosts = env.rank == 0 and not env.agent_store
    if not hosts:
        _await_listener(env, deadline, address)
    try:
        return dist.TCPStore(
            env.master_addr,
            env.master_port,
            None,
            is_master=hosts,
            timeout=timeout,
            wait_for_workers=False,
        )
    except RuntimeError as err:
        if hosts:
            raise SpecError(
                "MASTER_PORT", env.master_port, f"rank 0 cannot host the store at {address} ({err})"
            ) from None
        raise RanksLost(
            f"rank {env.rank}: rendezvous: the store at {address} did not let it join ({err})"
        ) from None


def _await_listener(env: LaunchEnv, deadline: float, address: str) -> None:
    who = "torchrun's agent" if env.agent_store else "rank 0"
    while True:
        try:
            with socket.create_connection((env.master_addr, env.master_port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() >= deadline:
                raise RanksLost(
                    f"rank {env.rank}: rendezvous at {address} timed out "
                    f"(--collective-timeout-seconds): nothing listens there; {who}, which "
                    "hosts the store, did not arrive. Exit code 3"
                ) from None
            time.sleep(POLL_SECONDS)


def _wait_for_everyone(store, env: LaunchEnv, timeout_seconds: float, deadline: float) -> None:
    """Poll until every rank's mark is in the store. At the deadline the missing ranks are
    named; the rank hosting the store also posts them (MISSING_KEY) and gives the others a
    moment to read them before its exit takes the store away."""
    keys = [mark_key(rank) for rank in range(env.world_size)]
    hosts = env.rank == 0 and not env.agent_store
    try:
        while not store.check(keys):
            if store.check([MISSING_KEY]):
                missing = [int(r) for r in store.get(MISSING_KEY).decode().split()]
                store.add(LEFT_KEY, 1)
                raise _rendezvous_lost(env, timeout_seconds, missing)
            if time.monotonic() >= deadline:
                missing = [r for r, key in enumerate(keys) if not store.check([key])]
                if not missing:
                    return  # the last one arrived just now
                if hosts:
                    _post_missing(store, missing, env.world_size)
                raise _rendezvous_lost(env, timeout_seconds, missing)
            time.sleep(POLL_SECONDS)
    except RanksLost:
        raise
    except RuntimeError as err:  # the store went away: its host gave up (or died) first
        raise RanksLost(
            f"rank {env.rank}: rendezvous at {env.master_addr}:{env.master_port}: the store "
            f"closed while waiting for the others (its host gave up or died: {err}). Exit code 3"
        ) from None


def _post_missing(store, missing: list[int], world_size: int) -> None:
    store.set(MISSING_KEY, " ".join(map(str, missing)))
    waiting = world_size - len(missing) - 1  # the arrived ranks other than this one
    until = time.monotonic() + HOST_LINGER_SECONDS
    while store.add(LEFT_KEY, 0) < waiting and time.monotonic() < until:
        time.sleep(POLL_SECONDS)


def _rendezvous_lost(env: LaunchEnv, timeout_seconds: float, missing: list[int]) -> RanksLost:
    return RanksLost(
        f"rank {env.rank}: rendezvous at {env.master_addr}:{env.master_port} timed out "
        f"after {timeout_seconds:g} s (--collective-timeout-seconds): "
        f"{ranks_text(missing)} of WORLD_SIZE {env.world_size} did not arrive. Exit code 3"
    )
