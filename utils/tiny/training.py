"""The optimisation loop and the quiet, single-threaded setting shared by the tiny target's and draft's training.

Both trainings run AdamW (no weight decay) under a cosine learning-rate schedule, with gradients clipped to
norm 1, on one torch thread, so that the same seed gives the same weights on one machine whatever its core
count (another CPU or kernel path rounds differently: see `utils.tiny.manifest`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable

import torch
from tqdm.auto import tqdm

from utils.tiny.target import quiet_progress_bars

__all__ = ["train_steps", "quiet_single_thread"]


def train_steps(parameters: Iterable[torch.nn.Parameter], step_loss: Callable[[int], tuple[torch.Tensor, dict]], *,
                steps: int, learning_rate: float, desc: str, warmup_steps: int = 0) -> list[float]:
    """Runs `steps` optimiser steps, each on the loss `step_loss(step)` returns.

    Args:
        parameters: what trains.
        step_loss: step index -> (scalar loss, statistics shown next to the progress bar as floats).
        steps: number of steps; the cosine schedule decays to zero over them.
        learning_rate: peak learning rate.
        warmup_steps: the learning rate ramps up linearly over these first steps (on top of the cosine decay).
        desc: progress bar label.

    Returns:
        The loss of every step.
    """
    parameters = [p for p in parameters if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=learning_rate, weight_decay=0.0)
    def factor(step: int) -> float:
        return min(1.0, (step + 1) / (warmup_steps + 1)) * 0.5 * (1 + math.cos(math.pi * step / steps))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    losses = []
    for step in (progress := tqdm(range(steps), desc=desc, leave=False)):
        loss, stats = step_loss(step)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        progress.set_postfix(loss=f"{losses[-1]:.3f}", **{name: f"{value:.2f}" for name, value in stats.items()})
    return losses


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
