"""A stand-in draft for tests: it knows the target's greedy answer and gets a seeded share of tokens wrong.

`NoisyAnswer` is a `utils.engine.proposal.Proposer`, so the same stand-in drives the OpenVINO engine and the
PyTorch oracle loop, over the same cases (`ORACLE_CASES`).
"""

from __future__ import annotations

import random

from utils.engine.proposal import Proposal

# (page, prompt, oracle seed, error rate, num_assistant_tokens, max_new_tokens): full and partial acceptance,
# answers that end inside a block (EOS) and budgets that cut one.
ORACLE_CASES = [
    (3, 0, 0, 0.0, 8, 48), (4, 0, 1, 0.0, 5, 48), (5, 0, 2, 0.0, 7, 48), (6, 0, 3, 0.0, 4, 48),
    (1, 1, 4, 0.0, 8, 48), (2, 1, 5, 0.2, 6, 48), (8, 1, 6, 0.2, 8, 48), (9, 1, 7, 0.3, 3, 48),
    (0, 0, 8, 0.0, 8, 12), (7, 0, 9, 0.0, 5, 9), (0, 1, 10, 0.1, 8, 30), (2, 0, 11, 0.5, 8, 17),
]


class NoisyAnswer:
    """Proposes the next tokens of a known answer, each wrong with probability `error_rate`, with confidences.

    It finds its place in the answer from the contexts it receives: the prompt at the first step (after which
    one token exists), then one position per token the previous step emitted.
    """

    clocks = ()

    def __init__(self, answer: tuple[int, ...], *, seed: int, error_rate: float, vocab_size: int = 1000):
        self.answer, self.error_rate, self.vocab_size = answer, error_rate, vocab_size
        self.random = random.Random(seed)
        self.generated = None

    def reset(self) -> None:
        self.generated = None

    def propose(self, anchor, context, *, num_tokens, timer) -> Proposal:
        """The answer's next tokens, some wrong; past the answer's end, random tokens."""
        self.generated = 1 if self.generated is None else self.generated + len(context)
        start = self.generated
        tokens = list(self.answer[start:start + num_tokens])
        tokens += [self.random.randrange(self.vocab_size) for _ in range(num_tokens - len(tokens))]
        tokens = [(t + 1) % self.vocab_size if self.random.random() < self.error_rate else t for t in tokens]
        return Proposal(tuple(tokens), tuple(self.random.random() for _ in tokens))
