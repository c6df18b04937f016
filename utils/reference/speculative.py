"""Greedy speculative decoding in PyTorch: the transformers target verified against the reference DSpark draft.

Correctness over speed: the target re-runs over the whole sequence at every step, so no hybrid-cache
rollback is involved and the result is the plain definition of speculative decoding. The OpenVINO engine
(`utils.engine.decoder`) is tested against it and against target-only decoding; both loops call the same
`Proposer` interface and make the same confidence cut (`Proposal.confident_prefix`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from utils.engine.proposal import Proposal, Proposer
from utils.engine.step_cost import StepCost
from utils.engine.timing import StageTimer
from utils.engine.verification import StepRecord, accepted_prefix_length, emitted_tokens, mean_tokens_per_step
from utils.reference.markov import propose
from utils.reference.modeling import DraftContextCache, DSparkDraftModel

__all__ = ["DSparkDrafter", "SpeculativeResult", "TargetRunner", "speculative_generate"]


class DSparkDrafter:
    """The reference DSpark draft as a `Proposer`: embeds the block with the target's table, keeps the context cache."""

    clocks = ()  # PyTorch: no OpenVINO time to report

    def __init__(self, model: DSparkDraftModel, embed_tokens: torch.nn.Module, *, markov_head_top_k: int = 64):
        self.model = model
        self.embed_tokens = embed_tokens
        self.markov_head_top_k = markov_head_top_k
        self.reset()

    def reset(self) -> None:
        self.cache = DraftContextCache(self.model.config.num_hidden_layers)

    @torch.no_grad()
    def block_hidden(self, anchor: int, context: torch.Tensor) -> torch.Tensor:
        """[1, B, H] the draft's block after `anchor`; the new context [N, L*H] joins the cache for later blocks."""
        config = self.model.config
        block = torch.tensor([[anchor] + [config.mask_token_id] * (config.block_size - 1)])
        return self.model.forward_block(self.embed_tokens(block), context[None], self.cache)

    def propose(self, anchor: int, context: torch.Tensor, *, num_tokens: int, timer: StageTimer) -> Proposal:
        return propose(self.model, self.block_hidden(anchor, context), anchor=anchor, num_tokens=num_tokens,
                       markov_head_top_k=self.markov_head_top_k)


class TargetRunner:
    """Runs the transformers MiniCPM-OCR target over a whole embedded sequence (no cache)."""

    def __init__(self, target: torch.nn.Module, *, hidden_layer_ids: tuple[int, ...]):
        self.target = target
        self.hidden_layer_ids = hidden_layer_ids

    @torch.no_grad()
    def prompt_embeddings(self, inputs: dict) -> torch.Tensor:
        """[1, P, H] prompt embeddings with the image features scattered in at the image tokens."""
        model = self.target.model
        embeds = model.get_input_embeddings()(inputs["input_ids"])
        if inputs.get("pixel_values") is not None:
            features = model.get_image_features(inputs["pixel_values"], inputs["target_sizes"]).pooler_output
            features = torch.cat(features, dim=0).to(embeds.dtype)
            mask = (inputs["input_ids"] == self.target.config.image_token_id)[..., None].expand_as(embeds)
            embeds = embeds.masked_scatter(mask, features)
        return embeds

    @torch.no_grad()
    def embed(self, token_ids: list[int]) -> torch.Tensor:
        """[1, n, H] target embeddings of token ids."""
        return self.target.get_input_embeddings()(torch.tensor([token_ids]))

    @torch.no_grad()
    def __call__(self, embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[1, S, H] -> (logits [S, V], concatenated decoder-layer outputs [1, S, L*H] for the draft)."""
        output = self.target.model.language_model(inputs_embeds=embeds, output_hidden_states=True, use_cache=False)
        logits = self.target.lm_head(output.last_hidden_state)[0]
        hidden = torch.cat([output.hidden_states[i + 1] for i in self.hidden_layer_ids], dim=-1)
        return logits, hidden


@dataclass
class SpeculativeResult:
    """Generated target ids and one record per target inference (the prefill step first)."""

    tokens: list[int]
    steps: list[StepRecord] = field(default_factory=list)

    @property
    def mean_tokens_per_step(self) -> float:
        return mean_tokens_per_step(self.steps)

    def get_num_accepted_tokens(self) -> int:
        """Accepted draft tokens over the run (OpenVINO GenAI's name)."""
        return sum(step.accepted for step in self.steps)


def speculative_generate(runner: TargetRunner, drafter: Proposer, inputs: dict, *, max_new_tokens: int,
                         num_assistant_tokens: int, eos_token_ids: tuple[int, ...],
                         confidence_threshold: float = 0.0, step_cost: StepCost | None = None
                         ) -> SpeculativeResult:
    """Greedy speculative decoding: the output equals the target's own greedy decoding, token for token.

    Args:
        runner: the target.
        drafter: proposes tokens each step (`DSparkDrafter`, or a stand-in).
        inputs: processor output (`input_ids`, `pixel_values`, `target_sizes`), batch of one.
        max_new_tokens: token budget.
        num_assistant_tokens: draft tokens verified per step (at most the draft's block size).
        eos_token_ids: tokens that end the answer (kept in the output, as `generate` does).
        confidence_threshold: verify only the leading drafts whose confidence reaches it (0 verifies all).
        step_cost: then verify only as many of them as a device at that cost should (`StepCost`).
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 1")
    drafter.reset()
    sequence = runner.prompt_embeddings(inputs)
    logits, new_hidden = runner(sequence)
    result = SpeculativeResult(tokens=[int(logits[-1].argmax())])
    result.steps.append(StepRecord(drafted=(), emitted=tuple(result.tokens)))
    while result.tokens[-1] not in eos_token_ids and len(result.tokens) < max_new_tokens:
        anchor = result.tokens[-1]
        proposal = drafter.propose(anchor, new_hidden[0], num_tokens=num_assistant_tokens, timer=StageTimer())
        drafts = list(proposal.confident_prefix(confidence_threshold, step_cost))
        verified = torch.cat((sequence, runner.embed([anchor] + drafts)), dim=1)
        logits, hidden = runner(verified)
        target_argmax = logits[-len(drafts) - 1:].argmax(-1).tolist()
        accepted = accepted_prefix_length(drafts, target_argmax)
        emitted = emitted_tokens(target_argmax, accepted, eos_token_ids=eos_token_ids,
                                 budget=max_new_tokens - len(result.tokens))
        result.steps.append(StepRecord.from_proposal(proposal, len(drafts), emitted))
        result.tokens.extend(emitted)
        kept = sequence.shape[1] + accepted + 1  # the anchor and the accepted drafts now have target states
        sequence, new_hidden = verified[:, :kept], hidden[:, sequence.shape[1]:kept]
    return result
