"""The PyTorch DSpark reference: block forward and context cache, Markov walks, confidence head."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from utils.checkpoint.draft import TargetSpec
from utils.reference.markov import dense_walk, propose, top_k_walk
from utils.reference.modeling import DraftContextCache, load_reference_draft

ATOL = 1e-5  # float32 reference against itself in another order of work


@pytest.fixture(scope="module")
def draft(tiny_pair):
    return load_reference_draft(tiny_pair.draft, target=TargetSpec.from_folder(tiny_pair.target))


def _context(draft, length, seed=0):
    generator = torch.Generator().manual_seed(seed)
    width = len(draft.config.target_layer_ids) * draft.config.hidden_size
    return torch.randn(1, length, width, generator=generator)


def _block(draft, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(1, draft.config.block_size, draft.config.hidden_size, generator=generator)


@torch.no_grad()
def test_context_cache_grown_in_pieces_equals_one_piece(draft):
    context, block = _context(draft, 12), _block(draft)
    whole = draft.forward_block(block, context, DraftContextCache(draft.config.num_hidden_layers))
    cache = DraftContextCache(draft.config.num_hidden_layers)
    draft.forward_block(block, context[:, :5], cache)
    pieces = draft.forward_block(block, context[:, 5:], cache)
    assert cache.length == 12
    torch.testing.assert_close(pieces, whole, atol=ATOL, rtol=0)


@torch.no_grad()
def test_cropped_cache_gives_the_block_it_gave_before(draft):
    context, block = _context(draft, 10), _block(draft)
    cache = DraftContextCache(draft.config.num_hidden_layers)
    first = draft.forward_block(block, context[:, :6], cache)
    draft.forward_block(block, context[:, 6:], cache)
    cache.crop(6)
    again = draft.forward_block(block, context[:, 6:6], cache)
    torch.testing.assert_close(again, first, atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match="cannot crop"):
        cache.crop(7)


@torch.no_grad()
def test_block_attention_is_not_causal(draft):
    context, block = _context(draft, 4), _block(draft)
    changed = block.clone()
    changed[0, -1] += 1.0
    first = draft.forward_block(block, context, DraftContextCache(draft.config.num_hidden_layers))
    second = draft.forward_block(changed, context, DraftContextCache(draft.config.num_hidden_layers))
    assert (first[0, 0] - second[0, 0]).abs().max() > 1e-4  # the anchor position sees the last mask position


@torch.no_grad()
def test_context_changes_the_block_output(draft):
    block = _block(draft)
    first = draft.forward_block(block, _context(draft, 4, seed=0), DraftContextCache(draft.config.num_hidden_layers))
    second = draft.forward_block(block, _context(draft, 4, seed=9), DraftContextCache(draft.config.num_hidden_layers))
    assert (first - second).abs().max() > 1e-4


@torch.no_grad()
def test_dense_walk_chains_the_previous_target_token(draft):
    logits = draft.logits(_block(draft)[0])
    anchor = 17
    draft_ids, previous = dense_walk(draft, logits, anchor=anchor)
    assert previous[0] == anchor
    assert previous[1:] == [int(draft.target_ids[i]) for i in draft_ids[:-1]]
    manual = int((logits[0] + draft.markov_w2.weight @ draft.markov_w1.weight[anchor]).argmax())
    assert draft_ids[0] == manual


@torch.no_grad()
def test_a_strong_markov_head_changes_the_walk(draft):
    strong = copy.deepcopy(draft)
    strong.markov_w2.weight.mul_(100.0)  # the random head is weak; a trained one moves argmaxes
    logits = strong.logits(_block(strong)[0])
    walked, _ = dense_walk(strong, logits, anchor=3)
    assert walked != logits.argmax(-1).tolist()


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_top_k_walk_equals_dense_walk_when_k_covers_the_draft_vocabulary(draft, data):
    vocab = draft.config.draft_vocab_size
    length = data.draw(st.integers(1, draft.config.block_size))
    values = data.draw(st.lists(st.integers(-3, 3), min_size=length * vocab, max_size=length * vocab))
    logits = torch.tensor(values, dtype=torch.float32).reshape(length, vocab)  # small integers: many ties
    anchor = data.draw(st.integers(0, draft.config.vocab_size - 1))
    top_k = data.draw(st.integers(vocab, vocab + 50))
    with torch.no_grad():
        assert top_k_walk(draft, logits, anchor=anchor, top_k=top_k) == dense_walk(draft, logits, anchor=anchor)


@torch.no_grad()
def test_top_k_walk_only_picks_candidates_from_the_top_k(draft):
    logits = draft.logits(_block(draft)[0])
    draft_ids, _ = top_k_walk(draft, logits, anchor=5, top_k=3)
    for position, token in enumerate(draft_ids):
        assert token in torch.topk(logits[position], 3).indices.tolist()


@torch.no_grad()
def test_confidence_is_the_sigmoid_of_the_head_on_hidden_and_previous_embedding(draft):
    hidden = _block(draft)
    proposal = propose(draft, hidden, anchor=11, num_tokens=4, markov_head_top_k=64)
    previous = [11, *proposal.target_ids[:-1]]
    features = torch.cat((hidden[0, :4], draft.markov_w1.weight[previous]), dim=-1)
    expected = torch.sigmoid(features @ draft.confidence_proj.weight[0] + draft.confidence_proj.bias[0])
    np.testing.assert_allclose(proposal.confidences, expected.numpy(), atol=1e-6)
    draft_ids, _ = top_k_walk(draft, draft.logits(hidden[0, :4]), anchor=11, top_k=64)
    assert proposal.target_ids == tuple(int(draft.target_ids[i]) for i in draft_ids)


@torch.no_grad()
def test_top_k_candidates_prefer_the_smallest_ids_among_ties(draft):
    vocab = draft.config.draft_vocab_size
    logits = torch.zeros(1, vocab)
    logits[0, [5, 9, 30]] = 1.0  # three clear candidates, then a tie of zeros for the 4th place
    biased = copy.deepcopy(draft)
    biased.markov_w1.weight.zero_()
    biased.markov_w1.weight[0, 0] = 1.0
    biased.markov_w2.weight.zero_()
    biased.markov_w2.weight[[0, vocab - 1], 0] = 10.0  # the bias favours two of the tied ids
    draft_ids, _ = top_k_walk(biased, logits, anchor=0, top_k=4)
    assert draft_ids == [0]  # id 0, not vocab - 1, took the 4th candidate place
    assert dense_walk(biased, logits, anchor=0)[0] == [0]
