"""The tiny trainings' optimisation loop: checkpoints that resume to the bits of a training that ran through."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from utils.tiny.config import Checkpoints
from utils.tiny.training import quiet_single_thread, train_steps


class _Interrupted(Exception):
    pass


def _train(steps: int, checkpoints: Checkpoints | None = None, *, stop_at: int | None = None):
    """A small model on a seeded stream of batches, with dropout (torch's random state) and a numpy draw per step;
    `stop_at` interrupts the training before that step. Returns (weights, losses, the record kept)."""
    torch.manual_seed(0)
    np.random.seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
    stream = (torch.from_numpy(np.random.default_rng(1).normal(size=(3, 4))).float() for _ in itertools.count())
    record = {"scales": []}

    def step_loss(step: int):
        if step == stop_at:
            raise _Interrupted
        record["scales"].append(float(np.random.random()))
        inputs = next(stream) * record["scales"][-1]
        return model(inputs).square().mean(), {}

    losses = train_steps(model.parameters(), step_loss, steps=steps, learning_rate=0.1, warmup_steps=1, desc="test",
                         checkpoints=checkpoints, skip=lambda done: list(itertools.islice(stream, done)),
                         record=record)
    return [parameter.detach().clone() for parameter in model.parameters()], losses, record


def test_a_resumed_training_gives_the_bits_of_one_that_ran_through(tmp_path):
    checkpoints = Checkpoints(tmp_path, options={"seed": 0, "steps": 4}, every=2)
    with quiet_single_thread():
        whole, whole_losses, whole_record = _train(4)
        with pytest.raises(_Interrupted):
            _train(4, checkpoints, stop_at=3)  # the checkpoint after step 2 is the last one written
        resumed, resumed_losses, resumed_record = _train(4, checkpoints)
        again, again_losses, _ = _train(4, checkpoints)  # a finished training's checkpoint: nothing left to run
    assert all(torch.equal(a, b) for a, b in zip(whole, resumed, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(whole, again, strict=True))
    assert resumed_losses == whole_losses == again_losses and len(whole_losses) == 4
    assert resumed_record["scales"] == whole_record["scales"] and len(whole_record["scales"]) == 4
    assert resumed_record["seconds"] > 0  # the steps' time, those before the resume included
    assert [path.name for path in tmp_path.iterdir()] == ["training.checkpoint.pt"]  # no partial file left


def test_a_checkpoint_of_other_options_is_refused_by_name(tmp_path):
    with quiet_single_thread():
        _train(2, Checkpoints(tmp_path, options={"seed": 0, "read": {"steps": 2, "kinds": ["prose"]}}))
        with pytest.raises(ValueError, match=r"read\.steps: saved 2, now 4"):
            _train(4, Checkpoints(tmp_path, options={"seed": 0, "read": {"steps": 4, "kinds": ["prose"]}}))
        with pytest.raises(ValueError, match=r"read\.kinds: saved \['prose'\], now None"):
            _train(4, Checkpoints(tmp_path, options={"seed": 0, "read": {"steps": 2}}))
    with pytest.raises(ValueError, match="every=0"):
        Checkpoints(tmp_path, options={}, every=0)
