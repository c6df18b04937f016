"""The decoding engine: greedy decoding of the target's language model, verified against a proposer's drafts.

    prefill(prompt embeddings) -> first token
    loop: proposer: drafts after the anchor -> the confident prefix of them
          -> language model verify [anchor, drafts] -> argmax on its output buffer -> accept the longest matching prefix
          -> rollback the target's state to it -> emit the accepted drafts and the bonus token

Without a proposer the loop is plain greedy decoding, one token per call (the baseline). Either way the output
is the target's own greedy output, token for token (`utils.engine.verification`). The engine knows nothing of
images or text: the OCR pipeline (`utils.pipeline`) turns a page into prompt embeddings and tokens into text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from utils.engine.language_model import LanguageModelSession
from utils.engine.metrics import GenerationMetrics
from utils.engine.proposal import Proposer
from utils.engine.step_cost import StepCost
from utils.engine.timing import StageTimer
from utils.engine.verification import StepRecord, accepted_prefix_length, emitted_tokens

__all__ = ["DEFAULT_CONFIDENCE_THRESHOLD", "Decoded", "SpeculativeDecoder"]

# Verify only the drafts the confidence head gives at least this; 0 verifies all. Chosen from measurements
# (docs/performance.md): on runs replayed from the distilled pair it verifies 8 of 15 drafts, +18% tokens/s at 1k
# context and +9% at 3k on this CPU, and on the earlier (corpus-writing) tiny pair's own loop it cut nothing it
# would accept (4.18 tokens per step, as at 0). 0.8 verifies fewer (+32% / +19% replayed) but cost that loop 10%
# of its tokens per step (3.78).
DEFAULT_CONFIDENCE_THRESHOLD = 0.5

StepCallback = Callable[[StepRecord, list[int]], object]  # (the step, every token so far)


@dataclass
class Decoded:
    """The tokens of one generation (the first EOS included) and how they were made."""

    tokens: list[int]
    metrics: GenerationMetrics


class SpeculativeDecoder:
    """Greedy decoding of a language-model session, with or without a proposer.

    Args:
        language_model: the target's text model and its state (prefill, decode, verify + accept).
        embed: the target's text embeddings: ids [1, S] -> [1, S, H], with a `clock` of its inference calls.
        stop_token_ids: tokens that end the answer (kept in the output, as `generate` does in transformers).
        proposer: proposes drafts each step; None decodes with the target alone.
        block_size: the most drafts the proposer makes in one step (its block size); needed with a proposer.
    """

    def __init__(self, language_model: LanguageModelSession, embed, *, stop_token_ids: Sequence[int],
                 proposer: Proposer | None = None, block_size: int | None = None):
        if proposer is not None and not 1 <= (block_size or 0) < language_model.verify_length:
            raise ValueError(f"block_size={block_size} must be in [1, {language_model.verify_length - 1}] "
                             f"(the target IR verifies {language_model.verify_length} tokens)")
        self.language_model, self.embed, self.proposer = language_model, embed, proposer
        self.stop_token_ids, self.block_size = tuple(stop_token_ids), block_size

    def generate(self, prompt_embeds: np.ndarray, *, max_new_tokens: int, num_assistant_tokens: int | None = None,
                 confidence_threshold: float = DEFAULT_CONFIDENCE_THRESHOLD, step_cost: StepCost | None = None,
                 timer: StageTimer | None = None, on_step: StepCallback | None = None) -> Decoded:
        """Decodes after the prompt until a stop token or `max_new_tokens`.

        Args:
            prompt_embeds: [T, H] embeddings of the whole prompt (image features already scattered in).
            max_new_tokens: token budget.
            num_assistant_tokens: drafts proposed per step, 1..block size (default: the block size).
            confidence_threshold: verify only the leading drafts whose confidence reaches it (0 verifies all;
                drafts without confidences are all verified).
            step_cost: the device's cost of a step (`StepCost`): verify, of that prefix, only as many drafts as
                give the most expected tokens per millisecond. None: the threshold alone decides.
            timer: where the stages go; pass one started earlier to count earlier work (the OCR pipeline's
                vision stage) in the time to first token. A fresh one by default.
            on_step: called after every step (the prefill first) with the step and every token so far.
        """
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 1")
        num_tokens = self._check_assistant_tokens(num_assistant_tokens)
        timer = timer or StageTimer()
        openvino_before = self.openvino_seconds()
        self.language_model.reset()
        if self.proposer is not None:
            self.proposer.reset()
        with timer.stage("prefill"):
            logits, context = self.language_model.prefill(prompt_embeds)
        tokens = [int(np.argmax(logits))]
        ttft = timer.elapsed()
        steps = [StepRecord(drafted=(), emitted=(tokens[0],))]
        if on_step:
            on_step(steps[0], tokens)
        while tokens[-1] not in self.stop_token_ids and len(tokens) < max_new_tokens:
            budget = max_new_tokens - len(tokens)
            if self.proposer is None:
                step, context = self._decode_step(tokens[-1], timer)
            else:
                step, context = self._speculative_step(tokens[-1], context, timer, budget=budget,
                                                       num_tokens=num_tokens, threshold=confidence_threshold,
                                                       step_cost=step_cost)
            steps.append(step)
            tokens.extend(step.emitted)
            if on_step:
                on_step(step, tokens)
        metrics = GenerationMetrics(ttft=ttft, total=timer.elapsed(), num_generated_tokens=len(tokens), steps=steps,
                                    stage_seconds=timer.seconds,
                                    openvino_seconds=self.openvino_seconds() - openvino_before)
        return Decoded(tokens, metrics)

    def openvino_seconds(self) -> float:
        """Seconds inside OpenVINO inference calls so far, over the target's and the proposer's models."""
        clocks = [self.language_model.clock, self.embed.clock, *(self.proposer.clocks if self.proposer else ())]
        return sum(clock.seconds for clock in clocks)

    def _check_assistant_tokens(self, num_assistant_tokens: int | None) -> int | None:
        if self.proposer is None:
            return None
        count = self.block_size if num_assistant_tokens is None else num_assistant_tokens
        if not 1 <= count <= self.block_size:
            raise ValueError(f"num_assistant_tokens={count} must be in [1, {self.block_size}] (the draft's block size)")
        return count

    def _decode_step(self, token: int, timer: StageTimer) -> tuple[StepRecord, np.ndarray]:
        with timer.stage("verification"):
            logits, hidden = self.language_model.decode_one(self.embed(np.array([[token]], np.int64))[0, 0])
        return StepRecord(drafted=(), emitted=(int(np.argmax(logits)),)), hidden[None]

    def _speculative_step(self, anchor: int, context: np.ndarray, timer: StageTimer, *, budget: int,
                          num_tokens: int, threshold: float, step_cost: StepCost | None
                          ) -> tuple[StepRecord, np.ndarray]:
        proposal = self.proposer.propose(anchor, context, num_tokens=num_tokens, timer=timer)
        drafts = list(proposal.confident_prefix(threshold, step_cost))
        with timer.stage("verification"):
            block_ids = np.array([[anchor] + drafts], np.int64)
            target_argmax, verify_hidden = self.language_model.verify_greedy(self.embed(block_ids)[0])
            target_argmax = target_argmax.tolist()
            accepted = accepted_prefix_length(drafts, target_argmax)
            self.language_model.accept(accepted + 1)
        emitted = emitted_tokens(target_argmax, accepted, eos_token_ids=self.stop_token_ids, budget=budget)
        return StepRecord.from_proposal(proposal, len(drafts), emitted), verify_hidden[:accepted + 1]
