"""The DSpark Markov head and confidence head as an OpenVINO graph, built op by op from the checkpoint's arrays.

Why op by op and not traced from PyTorch: the walk's argmax must break ties towards the smallest draft id, as
the reference does, and the Top-K and dense computations must share one IR behind a runtime switch. Both are
explicit here: every argmax is "the smallest id among the maxima", and an `If` on `top_k > 0` picks the
computation, so a call runs only one of them. The candidates come from an unstable TopK: a stable one costs
240 ms instead of 3-4 ms on [15, 114688] logits at real size (benchmarks/engine_efficiency.py), and only an
exact tie at the K-th place, which float logits practically never have, could make it pick other candidates
than the reference.

The walk is unrolled over the B positions of a block (B is small and static: the block size): step k scores
`U_k + W2 @ W1[prev]`, over the whole draft vocabulary (dense) or over the top-K entries of `U_k` only, takes
the argmax and maps it to its target id, which becomes `prev` for step k + 1 (the anchor for step 0). The
confidence head then reads `[h_k ; W1[prev_k]]` for every position at once.

Shape symbols:
    B: block size, Vd: draft vocabulary, V: input (target) vocabulary, r: Markov rank, H: hidden size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import openvino as ov
from openvino import opset15 as ops

from utils.contract import ANCHOR_TOKEN_ID, CONFIDENCES, LAST_HIDDEN_STATE, LOGITS, TOKEN_IDS, TOP_K

__all__ = ["MarkovHeadWeights", "build_markov_head"]


@dataclass(frozen=True)
class MarkovHeadWeights:
    """The arrays the Markov head IR is made of (float32 unless noted)."""

    markov_w1: np.ndarray  # [V, r], indexed by the previous target id
    markov_w2: np.ndarray  # [Vd, r]
    target_ids: np.ndarray  # [Vd] int64, absolute target id of each draft token
    confidence_weight: np.ndarray | None  # [1, H (+ r)], None without a confidence head
    confidence_bias: np.ndarray | None  # [1]
    confidence_with_markov: bool  # the confidence head also reads W1[prev]


def _const(array: np.ndarray) -> ov.Node:
    return ops.constant(np.asarray(array, order="C"))


def _smallest_argmax(scores: ov.Node, ids: ov.Node, *, draft_vocab_size: int) -> ov.Node:
    """[n] scores, [n] draft ids -> [1] the smallest id among the largest scores."""
    is_max = ops.equal(scores, ops.reduce_max(scores, _const(np.int64(0)), keep_dims=True))
    # above every id; not int64 max: the CPU plugin runs i64 as i32 inside `If` bodies, which breaks that sentinel
    no_id = _const(np.array([draft_vocab_size], dtype=np.int64))
    return ops.reduce_min(ops.select(is_max, ids, no_id), _const(np.int64(0)), keep_dims=True)


def _row(matrix: ov.Node, index: int) -> ov.Node:
    """Row `index` of a 2-D node, as a 1-D node."""
    return ops.gather(matrix, _const(np.int64(index)), _const(np.int64(0)))


def _markov_bias(w1: ov.Node, w2_rows: ov.Node, prev: ov.Node) -> ov.Node:
    """[n, r] rows of W2, [1] previous target id -> [n] bias `W2 @ W1[prev]`."""
    embedding = ops.gather(w1, prev, _const(np.int64(0)))  # [1, r]
    return ops.squeeze(ops.matmul(w2_rows, embedding, transpose_a=False, transpose_b=True), _const(np.int64(1)))


def _walk(anchor: ov.Node, weights: MarkovHeadWeights, block_size: int, choose) -> ov.Node:
    """Unrolled walk: `choose(step, prev)` returns the [1] draft id of a step; returns [B] target ids."""
    target_ids = _const(weights.target_ids.astype(np.int64))
    prev, chosen = anchor, []
    for step in range(block_size):
        draft_id = choose(step, prev)
        prev = ops.gather(target_ids, draft_id, _const(np.int64(0)))
        chosen.append(prev)
    return ops.concat(chosen, 0)


def _dense_body(weights: MarkovHeadWeights, *, block_size: int, draft_vocab_size: int) -> ov.Model:
    logits = ops.parameter([block_size, draft_vocab_size], ov.Type.f32, name=LOGITS)
    anchor = ops.parameter([1], ov.Type.i64, name=ANCHOR_TOKEN_ID)
    w1, w2 = _const(weights.markov_w1), _const(weights.markov_w2)
    all_ids = _const(np.arange(draft_vocab_size, dtype=np.int64))

    def choose(step, prev):
        scores = ops.add(_row(logits, step), _markov_bias(w1, w2, prev))
        return _smallest_argmax(scores, all_ids, draft_vocab_size=draft_vocab_size)

    walked = _walk(anchor, weights, block_size, choose)
    return ov.Model([ops.result(walked)], [logits, anchor], "dense_walk")


def _top_k_body(weights: MarkovHeadWeights, *, block_size: int, draft_vocab_size: int) -> ov.Model:
    logits = ops.parameter([block_size, draft_vocab_size], ov.Type.f32, name=LOGITS)
    anchor = ops.parameter([1], ov.Type.i64, name=ANCHOR_TOKEN_ID)
    top_k = ops.parameter([], ov.Type.i64, name=TOP_K)
    k = ops.minimum(top_k, _const(np.int64(draft_vocab_size)))
    candidates = ops.topk(logits, k, axis=1, mode="max", sort="value", index_element_type="i64", stable=False)
    values, ids = candidates.output(0), candidates.output(1)  # [B, K] each
    w1 = _const(weights.markov_w1)
    w2_rows = ops.gather(_const(weights.markov_w2), ids, _const(np.int64(0)))  # [B, K, r]

    def choose(step, prev):
        step_ids = _row(ids, step)
        scores = ops.add(_row(values, step), _markov_bias(w1, _row(w2_rows, step), prev))
        return _smallest_argmax(scores, step_ids, draft_vocab_size=draft_vocab_size)

    walked = _walk(anchor, weights, block_size, choose)
    return ov.Model([ops.result(walked)], [logits, anchor, top_k], "top_k_walk")


def _confidences(hidden: ov.Node, previous: ov.Node, weights: MarkovHeadWeights) -> ov.Node:
    """[B, H] hidden, [B] previous target ids -> [B] sigmoid of the confidence head."""
    features = hidden
    if weights.confidence_with_markov:
        features = ops.concat([hidden, ops.gather(_const(weights.markov_w1), previous, _const(np.int64(0)))], 1)
    logit = ops.add(ops.matmul(features, _const(weights.confidence_weight), transpose_a=False, transpose_b=True),
                    _const(weights.confidence_bias))
    return ops.squeeze(ops.sigmoid(logit), _const(np.int64(1)))


def build_markov_head(weights: MarkovHeadWeights, *, block_size: int, hidden_size: int) -> ov.Model:
    """The Markov head IR: both walks behind `If(top_k > 0)`, then the confidence head.

    Inputs: logits [B, Vd] f32; anchor_token_id [1] i64; top_k [] i64 (0: dense walk; else K, capped at Vd);
    last_hidden_state [B, H] f32 (only with a confidence head).
    Outputs: token_ids [B] i64 (target ids); confidences [B] f32 (only with a confidence head).

    Args:
        weights: the head's arrays.
        block_size: B, the positions of a block (the walk is unrolled over them).
        hidden_size: H of the draft.

    Returns:
        The model, not yet saved.
    """
    draft_vocab_size = weights.markov_w2.shape[0]
    logits = ops.parameter([block_size, draft_vocab_size], ov.Type.f32, name=LOGITS)
    anchor = ops.parameter([1], ov.Type.i64, name=ANCHOR_TOKEN_ID)
    top_k = ops.parameter([], ov.Type.i64, name=TOP_K)
    sizes = {"block_size": block_size, "draft_vocab_size": draft_vocab_size}
    top_k_body, dense_body = _top_k_body(weights, **sizes), _dense_body(weights, **sizes)
    choice = ops.if_op(ops.greater(top_k, _const(np.int64(0))).output(0))
    choice.set_then_body(top_k_body)
    choice.set_else_body(dense_body)
    choice.set_input(logits.output(0), top_k_body.parameters[0], dense_body.parameters[0])
    choice.set_input(anchor.output(0), top_k_body.parameters[1], dense_body.parameters[1])
    choice.set_input(top_k.output(0), top_k_body.parameters[2], None)
    walked = choice.set_output(top_k_body.results[0], dense_body.results[0])
    token_ids = ops.result(walked)
    token_ids.output(0).get_tensor().set_names({TOKEN_IDS})
    results, parameters = [token_ids], [logits, anchor, top_k]
    if weights.confidence_weight is not None:
        hidden = ops.parameter([block_size, hidden_size], ov.Type.f32, name=LAST_HIDDEN_STATE)
        previous = ops.concat([anchor, ops.slice(walked, _const(np.array([0])), _const(np.array([block_size - 1])),
                                                 _const(np.array([1])))], 0)
        confidences = ops.result(_confidences(hidden, previous, weights))
        confidences.output(0).get_tensor().set_names({CONFIDENCES})
        results.append(confidences)
        parameters.append(hidden)
    for parameter in parameters:
        parameter.output(0).get_tensor().set_names({parameter.get_friendly_name()})
    return ov.Model(results, parameters, "markov_head")
