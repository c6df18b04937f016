"""Why a speculative reading's speedup is what it is: the cost of one step of each run, in its own milliseconds.

The speedup is decode tokens per second over the target alone's (`GenerationMetrics.decode_tokens_per_s`: the
tokens after the first, per second after it). Both runs spend that time in steps, so, with each step's whole cost,

    speedup = tokens per decode step x ms per decode step of the target alone / ms per speculative step

holds exactly when both runs wrote the same text. A decode step of the target alone is one call of the target on
one token plus the host's work around it; a speculative step is the draft block, the Markov head, one verification
(the target on the anchor and the drafts at once) and the host's work. Tokens per decode step leaves out the
prefill, which emits the first token before the decode starts: `mean_tokens_per_step` counts it, so it is lower.
"""

from __future__ import annotations

from dataclasses import dataclass

from utils.engine.metrics import GenerationMetrics

__all__ = ["SpeedupTerms"]


def _decode_steps(metrics: GenerationMetrics) -> int:
    if metrics.num_steps < 2:
        raise ValueError(f"a run of {metrics.num_steps} step has no decode step (the first step is the prefill)")
    return metrics.num_steps - 1


def _stage_ms(metrics: GenerationMetrics, stage: str) -> float:
    return 1000 * metrics.stage_seconds.get(stage, 0.0) / _decode_steps(metrics)


def _host_ms(metrics: GenerationMetrics) -> float:
    """Decode time per step outside the timed stages (Python between the OpenVINO calls, streaming)."""
    staged = sum(metrics.stage_seconds.get(stage, 0.0) for stage in ("draft", "markov_head", "verification"))
    return 1000 * max(metrics.decode_seconds - staged, 0.0) / _decode_steps(metrics)


@dataclass(frozen=True)
class SpeedupTerms:
    """The terms of the speedup of one speculative reading over the target alone on the same page (ms per step)."""

    decode_ms: float  # target alone: the target's call on one token
    decode_host_ms: float  # target alone: the host's work per step
    draft_ms: float  # speculative: the draft block
    markov_ms: float  # speculative: the Markov head's walk
    verification_ms: float  # speculative: the target's call on the anchor and the verified drafts
    host_ms: float  # speculative: the host's work per step
    tokens_verified: float  # speculative: tokens per verification on average (the anchor and the drafts)
    tokens_per_step: float  # the prefill counted (`mean_tokens_per_step`)
    tokens_per_decode_step: float  # the prefill left out
    measured: float  # decode tokens/s of the speculative run over the target alone's

    @classmethod
    def of(cls, alone: GenerationMetrics, drafted: GenerationMetrics) -> SpeedupTerms:
        """The terms of two readings of one page: `alone` by the target alone, `drafted` with the draft."""
        if alone.num_generated_tokens != drafted.num_generated_tokens:
            raise ValueError(f"the runs wrote {alone.num_generated_tokens} and {drafted.num_generated_tokens} tokens: "
                             "the terms compare two readings of the same text")
        decode_steps = drafted.steps[1:]
        return cls(decode_ms=_stage_ms(alone, "verification"), decode_host_ms=_host_ms(alone),
                   draft_ms=_stage_ms(drafted, "draft"), markov_ms=_stage_ms(drafted, "markov_head"),
                   verification_ms=_stage_ms(drafted, "verification"), host_ms=_host_ms(drafted),
                   tokens_verified=1 + sum(len(step.drafted) for step in decode_steps) / len(decode_steps),
                   tokens_per_step=drafted.mean_tokens_per_step,
                   tokens_per_decode_step=sum(len(step.emitted) for step in decode_steps) / len(decode_steps),
                   measured=drafted.decode_tokens_per_s / alone.decode_tokens_per_s)

    @property
    def alone_step_ms(self) -> float:
        """A decode step of the target alone, whole."""
        return self.decode_ms + self.decode_host_ms

    @property
    def step_ms(self) -> float:
        """A speculative step, whole."""
        return self.draft_ms + self.markov_ms + self.verification_ms + self.host_ms

    @property
    def predicted(self) -> float:
        """The speedup the formula gives from the terms (equal to `measured` up to rounding)."""
        return self.tokens_per_decode_step * self.alone_step_ms / self.step_ms

    def lines(self) -> list[str]:
        """The terms and the formula, in sentences built from them."""
        return [
            f"target alone: {self.alone_step_ms:.1f} ms per decode step ({self.decode_ms:.1f} ms in the target's call "
            f"on one token, {self.decode_host_ms:.1f} ms of host work)",
            f"speculative: {self.step_ms:.1f} ms per step: draft block {self.draft_ms:.1f} ms + Markov head "
            f"{self.markov_ms:.1f} ms + verification {self.verification_ms:.1f} ms + host {self.host_ms:.1f} ms",
            f"a verification of {self.tokens_verified:.1f} tokens on average costs "
            f"{self.verification_ms / self.decode_ms:.2f}x the target's call on one token",
            f"tokens per step: {self.tokens_per_step:.2f} with the prefill, {self.tokens_per_decode_step:.2f} per "
            "decode step (without it: the speedup measures the decode only)",
            f"speedup = {self.tokens_per_decode_step:.2f} tokens per decode step x {self.alone_step_ms:.1f} ms / "
            f"{self.step_ms:.1f} ms = {self.predicted:.2f}x; measured: {self.measured:.2f}x"]
