"""train.launch.launch_env: the launch environment is checked before any process group starts (issue
15, points 3 and 8). Each case once failed: `WORLD_SIZE` without `RANK` raised a KeyError
traceback; `RANK` >= `WORLD_SIZE` or a `WORLD_SIZE` torchrun's own variables contradict waited at
rendezvous or trained alone into a shared folder. Now each is one line naming the variable, its
value and the rule (exit 2), and nothing is written."""

from __future__ import annotations

import pytest

from clirun import cli
from trainbudget.core.errors import SpecError
from trainbudget.train.launch.launch_env import LaunchEnv, read_launch_env
from trainrun import message_lines

HAND = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400"}
# what torchrun sets for worker 1 of `--nproc-per-node 2` on one node
TORCHRUN = {
    **HAND,
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_WORLD_SIZE": "1",
    "ROLE_WORLD_SIZE": "2",
    "TORCHELASTIC_RUN_ID": "none",
    "TORCHELASTIC_RESTART_COUNT": "1",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
}

# (environment, the words the error must hold)
BAD = {
    "world-without-rank": ({"WORLD_SIZE": "2", **HAND}, ["RANK = '(unset)'", "WORLD_SIZE (2)"]),
    "rank-without-world": ({"RANK": "1"}, ["RANK = '1'", "WORLD_SIZE is not"]),
    "rank-too-large": ({"WORLD_SIZE": "2", "RANK": "2", **HAND}, ["RANK = 2", "WORLD_SIZE (2)"]),
    # one of two hand-started processes told it is alone
    "alone-but-rank-1": ({"WORLD_SIZE": "1", "RANK": "1"}, ["RANK = 1", "WORLD_SIZE (1)"]),
    "world-zero": ({"WORLD_SIZE": "0", "RANK": "0"}, ["WORLD_SIZE = 0", ">= 1"]),
    "world-word": ({"WORLD_SIZE": "two", "RANK": "0"}, ["WORLD_SIZE = 'two'", "integer"]),
    "rank-negative": ({"WORLD_SIZE": "2", "RANK": "-1", **HAND}, ["RANK = -1", ">= 0"]),
    "no-master-addr": (
        {"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "29400"},
        ["MASTER_ADDR", "MASTER_ADDR:MASTER_PORT"],
    ),
    "port-out-of-range": (
        {"WORLD_SIZE": "2", "RANK": "0", **HAND, "MASTER_PORT": "70000"},
        ["MASTER_PORT = 70000", "[1, 65535]"],
    ),
    # torchrun started 2 processes on one node; WORLD_SIZE says 3: rank 2 would never come
    "torchrun-world-3-on-2": (
        {**TORCHRUN, "WORLD_SIZE": "3", "ROLE_WORLD_SIZE": "3"},
        ["WORLD_SIZE = 3", "LOCAL_WORLD_SIZE (2)", "GROUP_WORLD_SIZE 1"],
    ),
    "torchrun-role-world": ({**TORCHRUN, "ROLE_WORLD_SIZE": "4"}, ["ROLE_WORLD_SIZE (4)"]),
    # a worker of a 2-process torchrun told WORLD_SIZE=1: it would train alone
    "torchrun-world-1": (
        {**TORCHRUN, "WORLD_SIZE": "1", "RANK": "0", "ROLE_WORLD_SIZE": "1"},
        ["LOCAL_WORLD_SIZE = 2", "WORLD_SIZE (1)"],
    ),
    "local-rank-too-large": ({**TORCHRUN, "LOCAL_RANK": "2"}, ["LOCAL_RANK = 2"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_an_inconsistent_launch_is_named(case):
    environ, needles = BAD[case]
    with pytest.raises(SpecError) as info:
        read_launch_env(environ)
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))


def test_consistent_launches():
    assert read_launch_env({}) == LaunchEnv()
    assert read_launch_env({"RANK": "0"}) == LaunchEnv()
    assert read_launch_env({"WORLD_SIZE": "1", "RANK": "0"}) == LaunchEnv()
    assert read_launch_env(TORCHRUN) == LaunchEnv(
        rank=1,
        local_rank=1,
        world_size=2,
        master_addr="127.0.0.1",
        master_port=29400,
        agent_store=True,
        attempt=1,
    )
    by_hand = read_launch_env({"WORLD_SIZE": "3", "RANK": "2", **HAND})
    assert (by_hand.rank, by_hand.world_size, by_hand.agent_store) == (2, 3, False)


@pytest.mark.torch
@pytest.mark.parametrize(
    "case", ["world-without-rank", "alone-but-rank-1", "torchrun-world-3-on-2"]
)
def test_the_cli_prints_one_line_and_writes_nothing(tmp_path, monkeypatch, case):
    environ, needles = BAD[case]
    for name in {*TORCHRUN, "WORLD_SIZE", "RANK"}:
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "run"
    code, _, stderr = cli("train", "--out", str(out), "--device", "cpu", "--steps", "2")
    assert code == 2, stderr
    assert "Traceback" not in stderr
    assert len(message_lines(stderr)) == 1, stderr
    assert stderr.startswith("trainbudget train: error: ")
    for needle in needles:
        assert needle in stderr
    assert not out.exists()
