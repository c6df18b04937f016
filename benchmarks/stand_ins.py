"""Stand-ins that measure the engine apart from a draft's quality: a proposer whose acceptance is forced, and the
per-step counters of a decoder's run.

`ForcedAcceptanceProposer` pays for the real draft and Markov head IRs but proposes tokens whose acceptance follows
a schedule (`tau_schedule`: a mean number of tokens per step). `StepCounters` reads every clock after each step;
`summarize` turns the steps into means. Benchmarks and tests import them from here.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import numpy as np

from benchmarks.harness import BLOCK_SIZE
from benchmarks.real_size_model import VERIFY_LENGTH
from utils.engine.decoder import SpeculativeDecoder
from utils.engine.draft import DSparkProposer
from utils.engine.proposal import Proposal
from utils.engine.step_cost import StepCost
from utils.engine.timing import StageTimer

__all__ = ["COUNTERS", "accepted_drafts", "tau_schedule", "ForcedAcceptanceProposer", "StepCounters", "summarize"]

COUNTERS = ("wall", "target", "session", "draft", "markov", "draft_stage", "markov_stage")


def accepted_drafts(tau: float, step: int) -> int:
    """Drafts to accept at step `step` (0-based) so that the running mean of accepted + 1 tracks `tau`."""
    per_step = tau - 1.0
    return math.floor((step + 1) * per_step + 1e-9) - math.floor(step * per_step + 1e-9)


def tau_schedule(tau: float) -> Callable[[int], tuple[int, tuple[float, ...] | None]]:
    """step -> (drafts to accept, no confidences of its own): `tau` tokens per step on average."""
    if not 1.0 <= tau <= VERIFY_LENGTH:
        raise ValueError(f"tau={tau} must be in [1, {VERIFY_LENGTH}] (tokens per step of a block of "
                         f"{BLOCK_SIZE} drafts)")
    return lambda step: (accepted_drafts(tau, step), None)


class ForcedAcceptanceProposer:
    """A stand-in draft with forced acceptance: pays for the real draft and Markov head IRs, proposes known tokens.

    Each step runs the wrapped `DSparkProposer` (so the draft's context cache grows as in real use), then
    discards its tokens: the first `accepted` proposals of the schedule's step are the target's known greedy
    continuation, the next one is wrong on purpose, the rest are the draft's own (random) tokens. The
    confidences are the schedule's, when it has them (a replay of recorded runs), else the draft's. It finds
    its place in the continuation from the contexts it receives (`utils.engine.proposal`). Without a draft
    (`draft=None`) nothing is paid for and every proposal after the wrong one is wrong too.
    """

    def __init__(self, draft: DSparkProposer | None, continuation: list[int], *,
                 schedule: Callable[[int], tuple[int, tuple[float, ...] | None]], vocab_size: int):
        self.draft, self.continuation, self.schedule, self.vocab_size = draft, continuation, schedule, vocab_size
        self.clocks = draft.clocks if draft else ()
        self.reset()

    def reset(self) -> None:
        if self.draft:
            self.draft.reset()
        self._step, self._generated = 0, None

    def propose(self, anchor, context, *, num_tokens, timer) -> Proposal:
        walked = self.draft.propose(anchor, context, num_tokens=num_tokens, timer=timer) if self.draft else None
        self._generated = 1 if self._generated is None else self._generated + len(context)
        accepted, confidences = self.schedule(self._step)
        accepted = min(accepted, num_tokens)
        self._step += 1
        start = self._generated
        drafts = list(self.continuation[start:start + accepted])
        if accepted < num_tokens:
            wrong = (self.continuation[start + accepted] + 1) % self.vocab_size
            drafts.append(wrong)
            drafts += walked.target_ids[accepted + 1:num_tokens] if walked else [wrong] * (num_tokens - len(drafts))
        if confidences is not None:
            confidences = (tuple(confidences) + (0.0,) * num_tokens)[:num_tokens]
        return Proposal(tuple(drafts), walked.confidences if confidences is None and walked else confidences)


class StepCounters:
    """Runs a decoder and records, after every step, the wall clock and the clocks of each part.

    The decoder's `on_step` callback reads them; the difference between two consecutive readings is one
    step's cost (`COUNTERS`).
    """

    def __init__(self, decoder: SpeculativeDecoder):
        self.decoder = decoder
        self.last_steps = []  # the StepRecords of the last run, the prefill step first

    def _reading(self, timer: StageTimer) -> dict:
        language_model = self.decoder.language_model
        clocks = self.decoder.proposer.clocks if self.decoder.proposer else ()
        draft, markov = (clock.seconds for clock in clocks) if clocks else (0, 0)  # a stand-in runs no IR
        stages = timer.seconds
        return {"wall": time.perf_counter(), "target": language_model.clock.seconds,
                "session": language_model.host_seconds, "draft": draft, "markov": markov,
                "draft_stage": stages["draft"], "markov_stage": stages["markov_head"]}

    def run(self, context_embeds: np.ndarray, max_new_tokens: int, *, confidence_threshold: float = 0.0,
            step_cost: StepCost | None = None) -> tuple[list[int], list[dict], float]:
        """(tokens, per-step counters after the first token, decode seconds) of one generation after the context."""
        timer, readings, emitted = StageTimer(), [], []

        def record(step, tokens):
            readings.append(self._reading(timer))
            emitted.append(len(step.emitted))

        decoded = self.decoder.generate(context_embeds, max_new_tokens=max_new_tokens, timer=timer, on_step=record,
                                        confidence_threshold=confidence_threshold, step_cost=step_cost)
        self.last_steps = decoded.metrics.steps
        steps = [{key: after[key] - before[key] for key in COUNTERS} | {"emitted": count}
                 for before, after, count in zip(readings, readings[1:], emitted[1:])]
        return decoded.tokens, steps, decoded.metrics.decode_seconds


def _mean_ms(steps: list[dict], key) -> float:
    return 1000 * statistics.fmean(key(step) if callable(key) else step[key] for step in steps)


def _infer(step: dict) -> float:
    return step["target"] + step["draft"] + step["markov"]


def summarize(steps: list[dict]) -> dict:
    """Mean per-step times (ms), tokens per step and tokens/s of pooled steady steps.

    Means, not medians: with them, speedup / bound is exactly (inference share of the speculative wall time) /
    (inference share of the target-only wall time), so a slowdown of the shared CPU that hits host and
    inference alike cancels out of the efficiency even when it hits the configurations unequally.
    """
    tokens, wall = sum(step["emitted"] for step in steps), sum(step["wall"] for step in steps)
    return {
        "steps": len(steps), "tau": tokens / len(steps), "tokens_per_s": tokens / wall,
        "target_ms": _mean_ms(steps, "target"), "draft_ms": _mean_ms(steps, "draft"),
        "markov_ms": _mean_ms(steps, "markov"),
        "host_ms": _mean_ms(steps, lambda step: step["wall"] - _infer(step)),
        "session_host_ms": _mean_ms(steps, "session"),
        "draft_host_ms": _mean_ms(steps, lambda step: step["draft_stage"] + step["markov_stage"]
                                  - step["draft"] - step["markov"]),
    }
