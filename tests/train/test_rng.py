"""train/rng.py: the generator states survive torch.save -> torch.load(weights_only=True), and
restoring them repeats, bit for bit, what an uninterrupted process draws next."""

from __future__ import annotations

import io
import pickle
import random

import numpy as np
import pytest

pytest.importorskip("torch")

import torch

from trainbudget.train.rng import capture_rng_state, restore_rng_state

pytestmark = pytest.mark.torch


def draws() -> list:
    """The next numbers of every stream, gauss() twice: its second draw is the cached one."""
    return [
        random.random(),
        random.gauss(0.0, 1.0),
        random.gauss(0.0, 1.0),
        np.random.rand(3).tolist(),
        np.random.randn(3).tolist(),  # odd count: leaves numpy's cached gaussian set
        torch.rand(4).tolist(),
        torch.randn(5).tolist(),
    ]


def through_bytes(state: dict) -> dict:
    buf = io.BytesIO()
    torch.save(state, buf)
    return torch.load(io.BytesIO(buf.getvalue()), weights_only=True)


@pytest.mark.parametrize("warm_up", [0, 1, 7])
def test_round_trip_repeats_every_stream(warm_up: int) -> None:
    random.seed(11)
    np.random.seed(12)
    torch.manual_seed(13)
    for _ in range(warm_up):  # odd counts leave a cached gaussian in python and numpy
        draws()
        random.gauss(0.0, 1.0)
        np.random.randn(1)
    saved = through_bytes(capture_rng_state())
    expected = draws() + draws()  # the uninterrupted stream
    random.seed(999)  # the "new process": other states
    np.random.seed(999)
    torch.manual_seed(999)
    assert draws()[0] != expected[0]
    restore_rng_state(saved)
    assert draws() + draws() == expected  # exact: floats compared bit for bit


def test_state_is_plain_tensors_and_numbers() -> None:
    """No numpy arrays or tuples: what weights_only accepts, with python's gauss cache set."""
    random.seed(1)
    random.gauss(0.0, 1.0)  # gauss_next is now a float
    state = capture_rng_state()
    assert state["python"]["state"].shape == (625,)
    assert isinstance(state["python"]["gauss_next"], float)
    assert state["numpy"]["key"].shape == (624,)
    assert state["torch"].dtype == torch.uint8

    def plain(x) -> bool:
        if isinstance(x, dict):
            return all(isinstance(k, str) and plain(v) for k, v in x.items())
        if isinstance(x, list):
            return all(plain(v) for v in x)
        return x is None or isinstance(x, (torch.Tensor, int, float, str))

    assert plain(state)
    restored = through_bytes(state)
    assert restored["python"]["gauss_next"] == state["python"]["gauss_next"]
    assert torch.equal(restored["numpy"]["key"], state["numpy"]["key"])


def test_numpy_state_as_saved_by_plain_pickle_would_be_refused() -> None:
    """Why the arrays are converted: numpy's own state (an ndarray in a tuple) is not
    something weights_only loads."""
    buf = io.BytesIO()
    torch.save({"numpy": np.random.get_state()}, buf)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
