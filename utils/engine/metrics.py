"""What a generation reports: its steps and where the time went.

Field names follow OpenVINO GenAI's `PerfMetrics` and `SpeculativeDecodingMetrics` where they have them
(ttft, tokens/s, accepted tokens), so a reader can switch to `VLMPipeline` later.
"""

from __future__ import annotations

from dataclasses import dataclass

from utils.engine.verification import StepRecord, mean_tokens_per_step

__all__ = ["GenerationMetrics"]


@dataclass
class GenerationMetrics:
    """Timings and acceptance of one generation (seconds; tokens/s over the decode phase after the first token)."""

    ttft: float
    total: float
    num_generated_tokens: int
    steps: list[StepRecord]
    stage_seconds: dict[str, float]
    openvino_seconds: float  # inside compiled-model inference calls; the rest of `total` is host work

    @property
    def decode_seconds(self) -> float:
        return max(self.total - self.ttft, 1e-9)

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens after the first, per second of decoding (the seed PR's 'decode tok/s')."""
        return (self.num_generated_tokens - 1) / self.decode_seconds

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def accepted_per_step(self) -> list[int]:
        return [step.accepted for step in self.steps]

    @property
    def mean_tokens_per_step(self) -> float:
        return mean_tokens_per_step(self.steps)

    @property
    def time_breakdown(self) -> dict[str, float]:
        """Seconds per stage, with `other` = total - stages."""
        return dict(self.stage_seconds) | {"other": max(self.total - sum(self.stage_seconds.values()), 0.0)}

    @property
    def host_seconds(self) -> float:
        """Time spent outside OpenVINO inference calls."""
        return max(self.total - self.openvino_seconds, 0.0)

    def as_dict(self) -> dict:
        """JSON-ready summary."""
        return {
            "ttft_s": self.ttft,
            "total_s": self.total,
            "decode_tokens_per_s": self.decode_tokens_per_s,
            "num_generated_tokens": self.num_generated_tokens,
            "num_steps": self.num_steps,
            "mean_tokens_per_step": self.mean_tokens_per_step,
            "accepted_per_step": self.accepted_per_step,
            "time_breakdown_s": self.time_breakdown,
            "openvino_s": self.openvino_seconds,
            "host_s": self.host_seconds,
        }
