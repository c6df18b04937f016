"""Teacher-forced acceptance along the block (`utils.tiny.block_acceptance`): what a draft recipe is judged by."""

from __future__ import annotations

import pytest
import torch

from utils.tiny.block_acceptance import WAYS, accepted_prefixes, acceptance_along_block


def test_a_position_is_reached_only_when_every_draft_before_it_was_accepted():
    hits = torch.tensor([[True, True, False, True], [False, True, True, True], [True, True, True, True]])
    present = torch.tensor([[True] * 4, [True] * 4, [True, True, False, False]])  # the last answer ends early
    reached, accepted = accepted_prefixes(hits, present)
    assert reached.tolist() == [[True, True, True, False], [True, False, False, False], [True, True, False, False]]
    assert accepted.tolist() == [[True, True, False, False], [False] * 4, [True, True, False, False]]


@pytest.fixture(scope="module")
def sequences(tiny_pair):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from utils.checkpoint.draft import TargetSpec
    from utils.reference.modeling import load_reference_draft
    from utils.tiny.distill_data import collect_sequences, training_passages

    target = AutoModelForImageTextToText.from_pretrained(tiny_pair.target).eval()
    processor = AutoProcessor.from_pretrained(tiny_pair.target)
    draft = load_reference_draft(tiny_pair.draft, target=TargetSpec.from_folder(tiny_pair.target)).eval()
    cases = [(image, "Read the page.") for _, image in training_passages(3, seed=0)]
    found = collect_sequences(target, processor, cases, hidden_layer_ids=draft.config.target_layer_ids,
                              max_new_tokens=24)
    return draft, target.get_input_embeddings(), found


def test_the_figures_along_the_block_add_up_and_agree_with_the_confidence_ranking(sequences):
    """Tokens per step is 1 + the accepted drafts per anchor, which are the reached positions times their rates;
    the walk reaches exactly the positions the confidence head is scored on (`rank_confidence`, its own code)."""
    from utils.tiny.confidence import rank_confidence

    draft, embed_tokens, found = sequences
    figures = acceptance_along_block(draft, embed_tokens, found)
    assert set(figures) == set(WAYS)
    anchors = sum(len(s.token_ids) - s.prompt_length - 1 for s in found)
    for along in figures.values():
        assert along["anchors"] == anchors and along["reached"][0] == anchors
        assert len(along["rate"]) == draft.config.block_size
        assert all(0 <= rate <= 1 for rate in along["rate"])
        assert all(later <= earlier for earlier, later in zip(along["reached"], along["reached"][1:]))
        accepted = sum(rate * reached for rate, reached in zip(along["rate"], along["reached"]))
        assert along["tokens_per_step"] == pytest.approx(1 + accepted / anchors, abs=1e-3)
    assert sum(figures["markov_walk"]["reached"]) == rank_confidence(draft, embed_tokens, found)["positions"]
