"""How well a draft predicts its target on pages it never saw: tokens per step and confidence AUC.

Runs the PyTorch reference `speculative_generate` on the held-out sample pages
(`utils.pages.reading_pages.sample_pages()`) and reads the step records. The confidence head predicts, per
position, whether the draft token is accepted given that the earlier ones were (DeepSpec's per-position acceptance),
so its AUC compares the accepted positions with the first rejected position of each step; positions after a
rejection were drafted from a wrong prefix and are not scored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from utils.evaluation.acceptance import confidence_auc, scored_positions
from utils.pages.samples import SAMPLE_PROMPTS

__all__ = ["AcceptanceReport", "confidence_auc", "scored_positions", "measure_acceptance"]


@dataclass(frozen=True)
class AcceptanceReport:
    """Speculative decoding of the held-out cases with one draft: how well it teaches, in numbers."""

    tokens_per_step: float  # generated tokens / target inferences, the prefill step included
    tokens: int
    steps: int
    confidence_auc: float  # NaN when no draft position was rejected (or none accepted)
    accepted_positions: int  # draft positions the target accepted
    rejected_positions: int  # first rejected position of each step (the only rejected ones scored)
    answer_lengths: tuple[int, ...]  # tokens of each (page, prompt) answer, in order
    answers_ending_with_eos: int
    distinct_answers: int

    @property
    def rejected_share(self) -> float:
        """Share of the scored draft positions that the target rejected."""
        return self.rejected_positions / max(self.accepted_positions + self.rejected_positions, 1)

    def as_dict(self) -> dict:
        """The figures, JSON-ready (rounded for reading; NaN becomes None)."""
        auc = None if math.isnan(self.confidence_auc) else round(self.confidence_auc, 4)
        return {"tokens_per_step": round(self.tokens_per_step, 4), "tokens": self.tokens, "steps": self.steps,
                "confidence_auc": auc, "accepted_positions": self.accepted_positions,
                "rejected_positions": self.rejected_positions, "rejected_share": round(self.rejected_share, 4),
                "answers": len(self.answer_lengths), "answer_lengths": list(self.answer_lengths),
                "answers_ending_with_eos": self.answers_ending_with_eos, "distinct_answers": self.distinct_answers}


def measure_acceptance(target_dir: Path | str, draft_dir: Path | str, *, pages: Sequence | None = None,
                       prompts: Sequence[str] = SAMPLE_PROMPTS, num_assistant_tokens: int | None = None,
                       markov_head_top_k: int = 64, max_new_tokens: int = 64) -> AcceptanceReport:
    """Runs greedy speculative decoding on every (page, prompt) and pools the steps.

    Args:
        target_dir: the transformers target folder.
        draft_dir: the draft folder.
        pages: `SamplePage`s; defaults to the held-out `sample_pages()`.
        prompts: user prompts, each used with every page.
        num_assistant_tokens: drafts verified per step; defaults to the draft's block size.
        markov_head_top_k: K of the Markov candidate scorer; 0 selects the dense walk.
        max_new_tokens: answer budget per case.

    Returns:
        An `AcceptanceReport`.
    """
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from utils.checkpoint.draft import TargetSpec
    from utils.pages.reading_pages import sample_pages
    from utils.reference.modeling import load_reference_draft
    from utils.reference.speculative import DSparkDrafter, TargetRunner, speculative_generate
    from utils.tiny.distill_data import prompt_inputs

    target = AutoModelForImageTextToText.from_pretrained(target_dir).eval()
    processor = AutoProcessor.from_pretrained(target_dir)
    draft = load_reference_draft(draft_dir, target=TargetSpec.from_folder(target_dir))
    runner = TargetRunner(target, hidden_layer_ids=draft.config.target_layer_ids)
    eos = (target.generation_config.eos_token_id,)
    steps, answers = [], []
    for page in sample_pages() if pages is None else pages:
        for prompt in prompts:
            drafter = DSparkDrafter(draft, target.get_input_embeddings(), markov_head_top_k=markov_head_top_k)
            with torch.no_grad():
                result = speculative_generate(runner, drafter, prompt_inputs(processor, page.image, prompt),
                                              max_new_tokens=max_new_tokens, eos_token_ids=eos,
                                              num_assistant_tokens=num_assistant_tokens or draft.config.block_size)
            steps += result.steps
            answers.append(tuple(token for step in result.steps for token in step.emitted))
    tokens = sum(step.accepted + 1 for step in steps)
    scores, accepted = scored_positions(steps)
    return AcceptanceReport(
        tokens_per_step=tokens / len(steps), tokens=tokens, steps=len(steps),
        confidence_auc=confidence_auc(scores, accepted), accepted_positions=sum(accepted),
        rejected_positions=len(accepted) - sum(accepted), answer_lengths=tuple(len(answer) for answer in answers),
        answers_ending_with_eos=sum(1 for answer in answers if answer and answer[-1] in eos),
        distinct_answers=len(set(answers)))
