"""Calibrating the tiny draft's confidence head: the positions it scores, what it changes, what it guarantees."""

from __future__ import annotations

import pytest
import torch

from utils.checkpoint.draft import TargetSpec
from utils.reference.modeling import DraftContextCache, load_reference_draft
from utils.tiny import default_pair
from utils.tiny.anchor_batch import draft_index_of
from utils.tiny.confidence import calibrate_confidence_head, rank_confidence, scored_drafts
from utils.tiny.distill_data import collect_sequences, training_pages

ATOL = 1e-5  # float32: the batched anchor forward against one block at a time


@pytest.fixture(scope="module")
def shipped():
    """The shipped target and draft, and the target's answers on four fresh training pages (40 tokens each)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    pair = default_pair()
    target = AutoModelForImageTextToText.from_pretrained(pair.target).eval()
    processor = AutoProcessor.from_pretrained(pair.target)
    draft = load_reference_draft(pair.draft, target=TargetSpec.from_folder(pair.target))
    cases = [(page, "Text Recognition:") for page in training_pages(4, seed=7, style="typewriter")]
    sequences = collect_sequences(target, processor, cases, hidden_layer_ids=draft.config.target_layer_ids,
                                  max_new_tokens=40)
    return target.get_input_embeddings(), draft, sequences


def _walked_one_block_at_a_time(draft, embed_tokens, sequence):
    """(features, probability of the greedy token, accepted) of each position the decoder would score: a block
    at every anchor run alone, the dense walk fed the previous target token, stopped after the first rejection."""
    config, index, tokens = draft.config, draft_index_of(draft), sequence.token_ids
    rows = []
    for anchor in range(sequence.prompt_length, len(tokens) - 1):
        block = torch.full((config.block_size,), config.mask_token_id)
        block[0] = tokens[anchor]
        with torch.no_grad():
            hidden = draft.forward_block(embed_tokens(block)[None], sequence.target_hidden[:anchor][None],
                                         DraftContextCache(config.num_hidden_layers))[0]
            for k in range(min(config.block_size, len(tokens) - 1 - anchor)):
                previous, label = tokens[anchor + k], tokens[anchor + k + 1]
                scores = draft.logits(hidden[k]) + draft.markov_bias(previous[None])[0]
                probability, greedy = scores.softmax(-1).max(-1)
                accepted = bool(greedy == index[label]) and bool(index[label] >= 0)
                features = torch.cat((hidden[k], draft.markov_w1(previous)))
                rows.append((features, probability, accepted))
                if not accepted:
                    break
    return rows


def test_scored_drafts_are_the_positions_the_decoder_reaches(shipped):
    embed_tokens, draft, sequences = shipped
    drafts = scored_drafts(draft, embed_tokens, sequences[:2])
    expected = [row for sequence in sequences[:2] for row in _walked_one_block_at_a_time(draft, embed_tokens, sequence)]
    assert len(drafts.accepted) == len(expected)
    assert drafts.accepted.tolist() == [accepted for _, _, accepted in expected]
    assert (~drafts.accepted).any() and drafts.accepted.any()
    torch.testing.assert_close(drafts.features, torch.stack([features for features, _, _ in expected]),
                               rtol=0, atol=ATOL)
    torch.testing.assert_close(drafts.draft_probability, torch.stack([p for _, p, _ in expected]), rtol=0, atol=ATOL)


def test_calibration_refits_only_the_head_and_matches_the_acceptance_rate(shipped):
    """Platt scaling fits an intercept by maximum likelihood, so the mean confidence over the calibration positions
    equals their acceptance rate; the shipped head, calibrated on other pages, does not have that mean here."""
    embed_tokens, draft, sequences = shipped
    before = {name: tensor.clone() for name, tensor in draft.state_dict().items()}
    with torch.no_grad():
        features = scored_drafts(draft, embed_tokens, sequences).features
        shipped_confidence = torch.sigmoid(draft.confidence_proj(features))
    try:
        report = calibrate_confidence_head(draft, embed_tokens, sequences)
        drafts = scored_drafts(draft, embed_tokens, sequences)
        after = draft.state_dict()
        changed = {name for name in before if not torch.equal(before[name], after[name])}
        with torch.no_grad():
            confidence = torch.sigmoid(draft.confidence_proj(drafts.features)[:, 0])
    finally:
        draft.load_state_dict(before)
    assert changed == {"confidence_proj.weight", "confidence_proj.bias"}
    assert report.positions == len(drafts.accepted) and report.rejected == int((~drafts.accepted).sum()) > 0
    acceptance = drafts.accepted.float().mean().item()
    assert confidence.mean().item() == pytest.approx(acceptance, abs=2e-3)
    assert abs(shipped_confidence.mean().item() - acceptance) > 2e-3  # so the check above can fail


def test_the_ranking_scores_the_head_at_the_positions_the_decoder_reaches(shipped):
    """The manifest's confidence figures: the scored positions, and the AUC of the head's scores (a head turned
    around ranks the other way) beside that of the draft's own probability (which the head does not change)."""
    embed_tokens, draft, sequences = shipped
    drafts = scored_drafts(draft, embed_tokens, sequences)
    ranking = rank_confidence(draft, embed_tokens, sequences)
    assert (ranking["positions"], ranking["rejected"]) == (len(drafts.accepted), int((~drafts.accepted).sum()))
    head = draft.confidence_proj
    with torch.no_grad():
        head.weight.neg_(), head.bias.neg_()
    try:
        turned = rank_confidence(draft, embed_tokens, sequences)
    finally:
        with torch.no_grad():
            head.weight.neg_(), head.bias.neg_()
    assert 0.5 < ranking["auc"] and turned["auc"] == pytest.approx(1 - ranking["auc"], abs=2e-4)
    assert turned["auc_of_draft_probability"] == ranking["auc_of_draft_probability"]


def test_calibration_needs_a_head_and_answers(shipped):
    embed_tokens, draft, sequences = shipped
    head = draft.confidence_proj
    draft.confidence_proj = None
    try:
        with pytest.raises(ValueError, match="no confidence head"):
            calibrate_confidence_head(draft, embed_tokens, sequences)
    finally:
        draft.confidence_proj = head
    with pytest.raises(ValueError, match="no answers"):
        calibrate_confidence_head(draft, embed_tokens, [])
