"""The optimisation loop and the quiet, single-threaded setting shared by the tiny target's and draft's training.

Both trainings run AdamW (no weight decay) under a cosine learning-rate schedule, with gradients clipped to
norm 1, on one torch thread, so that the same seed gives the same weights on one machine whatever its core
count (another CPU or kernel path rounds differently: see `utils.tiny.manifest`). A training can save checkpoints
and resume from them (`Checkpoints`) with the bits of one that ran through.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import time
from collections.abc import Callable, Iterable

import numpy as np
import torch
from tqdm.auto import tqdm

from utils.tiny.config import Checkpoints
from utils.tiny.target import quiet_progress_bars

__all__ = ["train_steps", "quiet_single_thread"]


def train_steps(parameters: Iterable[torch.nn.Parameter], step_loss: Callable[[int], tuple[torch.Tensor, dict]], *,
                steps: int, learning_rate: float, desc: str, warmup_steps: int = 0,
                checkpoints: Checkpoints | None = None, name: str = "training",
                skip: Callable[[int], None] | None = None, record: dict | None = None) -> list[float]:
    """Runs `steps` optimiser steps, each on the loss `step_loss(step)` returns.

    Args:
        parameters: what trains.
        step_loss: step index -> (scalar loss, statistics shown next to the progress bar as floats).
        steps: number of steps; the cosine schedule decays to zero over them.
        learning_rate: peak learning rate.
        warmup_steps: the learning rate ramps up linearly over these first steps (on top of the cosine decay).
        desc: progress bar label.
        checkpoints: save a checkpoint every `checkpoints.every` steps and after the last one, in
            `checkpoints.path(name)`, and resume from one found there: the same weights as a training that ran
            through, provided `skip` advances every data stream `step_loss` draws from.
        name: this training's checkpoint name (one per phase of a training).
        skip: `skip(steps)` draws and drops what the first `steps` steps drew; called once when resuming.
        record: JSON-ready figures the caller keeps across a resume (a learning curve, say): saved with each
            checkpoint and restored in place; `record["seconds"]` is kept here: the time spent in the steps,
            those before a resume included.

    Returns:
        The loss of every step (those before a resume included).
    """
    parameters = [p for p in parameters if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=learning_rate, weight_decay=0.0)
    def factor(step: int) -> float:
        return min(1.0, (step + 1) / (warmup_steps + 1)) * 0.5 * (1 + math.cos(math.pi * step / steps))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    losses, first, record = [], 0, {} if record is None else record
    if checkpoints is not None and checkpoints.path(name).exists():
        first, losses = _resume(checkpoints, name, parameters, optimizer, schedule, record)
        if skip is not None and first < steps:
            skip(first)
    seconds, start = record.get("seconds", 0.0), time.perf_counter()
    for step in (progress := tqdm(range(first, steps), desc=desc, leave=False, initial=first, total=steps)):
        loss, stats = step_loss(step)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        progress.set_postfix(loss=f"{losses[-1]:.3f}", **{stat: f"{value:.2f}" for stat, value in stats.items()})
        record["seconds"] = seconds + time.perf_counter() - start
        if checkpoints is not None and (step + 1 == steps or (step + 1) % checkpoints.every == 0):
            _save(checkpoints, name, step + 1, parameters, optimizer, schedule, losses, record)
    return losses


def _random_states() -> dict:
    """torch's, numpy's global and Python's random states, JSON-ready but torch's (a byte tensor)."""
    kind, keys, position, has_gauss, gauss = np.random.get_state()
    version, state, python_gauss = random.getstate()
    return {"torch": torch.get_rng_state(),
            "numpy": [kind, keys.tolist(), position, has_gauss, gauss],
            "python": [version, list(state), python_gauss]}


def _set_random_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    kind, keys, position, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), position, has_gauss, gauss))
    version, state, python_gauss = states["python"]
    random.setstate((version, tuple(state), python_gauss))


def _save(checkpoints: Checkpoints, name: str, step: int, parameters: list[torch.nn.Parameter], optimizer,
          schedule, losses: list[float], record: dict) -> None:
    """Writes the checkpoint whole or not at all: into a temporary file, then renamed over the last one."""
    path = checkpoints.path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    progress = {"options": checkpoints.options, "step": step, "losses": losses, "record": record}
    temporary = path.with_name(f".{path.name}.partial")
    torch.save({"parameters": [p.detach().clone() for p in parameters], "optimizer": optimizer.state_dict(),
                "schedule": schedule.state_dict(), "random": _random_states(), "progress": json.dumps(progress)},
               temporary)
    os.replace(temporary, path)


def _resume(checkpoints: Checkpoints, name: str, parameters: list[torch.nn.Parameter], optimizer, schedule,
            record: dict) -> tuple[int, list[float]]:
    """Restores a checkpoint's weights, optimiser, schedule, random states and `record`; returns (step, losses).
    A checkpoint of other options, or of other parameters, is refused by a ValueError naming what differs."""
    path = checkpoints.path(name)
    saved = torch.load(path, weights_only=True)
    progress = json.loads(saved["progress"])
    differing = _first_difference(progress["options"], checkpoints.options)
    if differing:
        raise ValueError(f"{path} was saved by a training with other options ({differing}); remove it, or resume "
                         f"with the options it was saved with")
    shapes = [tuple(p.shape) for p in saved["parameters"]]
    if shapes != [tuple(p.shape) for p in parameters]:
        raise ValueError(f"{path} holds {len(shapes)} parameters of other shapes than this training's "
                         f"{len(parameters)}: not a checkpoint of this model")
    with torch.no_grad():
        for parameter, value in zip(parameters, saved["parameters"]):
            parameter.copy_(value)
    optimizer.load_state_dict(saved["optimizer"])
    schedule.load_state_dict(saved["schedule"])
    _set_random_states(saved["random"])
    record.clear()
    record.update(progress["record"])
    return progress["step"], progress["losses"]


def _first_difference(saved, wanted, where: str = "") -> str:
    """The first option that differs between two JSON-ready option dicts, as 'name: saved X, now Y'; '' if none."""
    if isinstance(saved, dict) and isinstance(wanted, dict):
        for key in sorted(saved.keys() | wanted.keys()):
            found = _first_difference(saved.get(key), wanted.get(key), f"{where}.{key}" if where else key)
            if found:
                return found
        return ""
    return "" if saved == wanted else f"{where or 'options'}: saved {saved!r}, now {wanted!r}"


@contextlib.contextmanager
def quiet_single_thread():
    """One torch thread (the same seed then gives the same weights on this machine), and no transformers chatter.

    Hides transformers' loading bars and slow-kernel notes: the trainings show their own progress.
    """
    from transformers.utils import logging

    threads, verbosity = torch.get_num_threads(), logging.get_verbosity()
    torch.set_num_threads(1)
    logging.set_verbosity_error()
    try:
        with quiet_progress_bars():
            yield
    finally:
        torch.set_num_threads(threads)
        logging.set_verbosity(verbosity)
