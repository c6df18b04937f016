"""A stand-in draft for tests: it knows the target's greedy answer and gets a seeded share of tokens wrong."""

from __future__ import annotations

import random


class NoisyAnswer:
    """Proposes the next tokens of a known answer, each wrong with probability `error_rate`, with confidences."""

    def __init__(self, answer: tuple[int, ...], *, seed: int, error_rate: float, vocab_size: int = 1000):
        self.answer, self.error_rate, self.vocab_size = answer, error_rate, vocab_size
        self.random = random.Random(seed)

    def next_tokens(self, generated: list[int], num_tokens: int) -> tuple[list[int], list[float]]:
        """(tokens after `generated`, a confidence for each); past the answer's end, random tokens."""
        start = len(generated)
        tokens = list(self.answer[start:start + num_tokens])
        tokens += [self.random.randrange(self.vocab_size) for _ in range(num_tokens - len(tokens))]
        tokens = [(t + 1) % self.vocab_size if self.random.random() < self.error_rate else t for t in tokens]
        return tokens, [self.random.random() for _ in tokens]
