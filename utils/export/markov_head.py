"""The DSpark Markov head and confidence head as an OpenVINO graph, built op by op from the checkpoint's arrays.

Why op by op and not traced from PyTorch: the walk's argmax must break ties towards the smallest draft id, as
the reference does, and the Top-K and dense computations must share one IR behind a runtime switch. Both are
explicit here: every argmax is "the smallest id among the maxima", and `top_k` sizes the two computations so
that the one not asked for runs on an empty tensor: the Top-K scorer on K = min(top_k, Vd) candidates (none
when top_k is 0), the dense walk on n = 1 copy of the Markov embedding when top_k is 0, else none. So a call
pays for one of them, and the graph has no `If`: each table is one Constant read by plain Gathers and MatMuls,
stored once, and compressed tables stay compressed in memory (a table passed into `If` bodies reaches them as a
Parameter, which the CPU plugin unpacks to f32 when it compiles an INT8 IR). The candidates come from an
unstable TopK: a stable one costs 240 ms instead of 3-4 ms on [15, 114688] logits at real size
(benchmarks/engine_efficiency.py), and only an exact tie at the K-th place, which float logits practically never
have, could make it pick other candidates than the reference.

The walk is unrolled over the B positions of a block (B is small and static: the block size): step k scores
`U_k + W2 @ W1[prev]` over the top-K entries of `U_k` (Top-K) or over the whole draft vocabulary (dense), takes
the argmax and maps it to its target id, which becomes `prev` for step k + 1 (the anchor for step 0). The
confidence head then reads `[h_k ; W1[prev_k]]` for every position at once.

Shape symbols:
    B: block size, Vd: draft vocabulary, V: input (target) vocabulary, r: Markov rank, H: hidden size,
    K: Top-K candidates (0 for the dense walk), n: dense rows (1 for the dense walk, else 0).
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


def _table(array: np.ndarray, name: str) -> ov.Node:
    """The one Constant of a table, named after the checkpoint tensor (weight reports and compression show it)."""
    constant = _const(array)
    constant.set_friendly_name(name)
    return constant


def _smallest_argmax(scores: ov.Node, ids: ov.Node, *, draft_vocab_size: int) -> ov.Node:
    """[n] scores, [n] draft ids -> [1] the smallest id among the largest scores."""
    is_max = ops.equal(scores, ops.reduce_max(scores, _const(np.int64(0)), keep_dims=True))
    # above every id; not int64 max: the CPU plugin may run i64 as i32, which breaks that sentinel
    no_id = _const(np.array([draft_vocab_size], dtype=np.int64))
    return ops.reduce_min(ops.select(is_max, ids, no_id), _const(np.int64(0)), keep_dims=True)


def _row(matrix: ov.Node, index: int) -> ov.Node:
    """Row `index` of a node, one dimension less."""
    return ops.gather(matrix, _const(np.int64(index)), _const(np.int64(0)))


def _leading(node: ov.Node, length: ov.Node, *, axis: int) -> ov.Node:
    """The first `length` ([1] i64) entries of `node` along `axis`."""
    return ops.slice(node, _const(np.array([0])), length, _const(np.array([1])), _const(np.array([axis])))


def _candidates(logits: ov.Node, top_k: ov.Node, markov_w2: ov.Node, *, draft_vocab_size: int
                ) -> tuple[ov.Node, ov.Node, ov.Node]:
    """Top-K entries of each row of the logits: values [B, K], draft ids [B, K] and their W2 rows [B, K, r].

    K = min(top_k, Vd), 0 for the dense walk (TopK itself needs K >= 1: it computes one and keeps none).
    """
    k = ops.minimum(top_k, _const(np.int64(draft_vocab_size)))
    top = ops.topk(logits, ops.maximum(k, _const(np.int64(1))), axis=1, mode="max", sort="value",
                   index_element_type="i64", stable=False)
    kept = ops.unsqueeze(k, _const(np.int64(0)))
    values, ids = (_leading(top.output(index), kept, axis=1) for index in (0, 1))
    return values, ids, ops.gather(markov_w2, ids, _const(np.int64(0)))


def _walk(logits: ov.Node, anchor: ov.Node, top_k: ov.Node, tables: dict[str, ov.Node], *, block_size: int,
          draft_vocab_size: int) -> ov.Node:
    """Unrolled walk, Top-K scorer or dense by `top_k` (0: dense); returns the [B] target ids it chose."""
    values, ids, w2_rows = _candidates(logits, top_k, tables["markov_w2"], draft_vocab_size=draft_vocab_size)
    dense_rows = ops.convert(ops.equal(ops.unsqueeze(top_k, _const(np.int64(0))), _const(np.array([0]))), "i64")
    dense_ids = _leading(_const(np.arange(draft_vocab_size, dtype=np.int64)),
                         ops.multiply(dense_rows, _const(np.array([draft_vocab_size]))), axis=0)  # [n * Vd]
    prev, chosen = anchor, []
    for step in range(block_size):
        embedding = ops.gather(tables["markov_w1"], prev, _const(np.int64(0)))  # [1, r]
        top_k_scores = ops.add(_row(values, step), ops.squeeze(
            ops.matmul(_row(w2_rows, step), embedding, transpose_a=False, transpose_b=True), _const(np.int64(1))))
        dense_bias = ops.matmul(_leading(embedding, dense_rows, axis=0), tables["markov_w2"],
                                transpose_a=False, transpose_b=True)  # [n, Vd]
        dense_scores = ops.reshape(ops.add(_row(logits, step), dense_bias), _const(np.array([-1])), False)
        draft_id = _smallest_argmax(ops.concat([top_k_scores, dense_scores], 0),
                                    ops.concat([_row(ids, step), dense_ids], 0), draft_vocab_size=draft_vocab_size)
        prev = ops.gather(tables["target_ids"], draft_id, _const(np.int64(0)))
        chosen.append(prev)
    return ops.concat(chosen, 0)


def _confidences(hidden: ov.Node, previous: ov.Node, markov_w1: ov.Node, weights: MarkovHeadWeights) -> ov.Node:
    """[B, H] hidden, [B] previous target ids -> [B] sigmoid of the confidence head."""
    features = hidden
    if weights.confidence_with_markov:
        features = ops.concat([hidden, ops.gather(markov_w1, previous, _const(np.int64(0)))], 1)
    logit = ops.add(ops.matmul(features, _const(weights.confidence_weight), transpose_a=False, transpose_b=True),
                    _const(weights.confidence_bias))
    return ops.squeeze(ops.sigmoid(logit), _const(np.int64(1)))


def build_markov_head(weights: MarkovHeadWeights, *, block_size: int, hidden_size: int) -> ov.Model:
    """The Markov head IR: the walk (Top-K scorer if `top_k` > 0, else dense), then the confidence head.

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
    tables = {"markov_w1": _table(weights.markov_w1, "markov_w1"), "markov_w2": _table(weights.markov_w2, "markov_w2"),
              "target_ids": _table(weights.target_ids.astype(np.int64), "target_ids")}
    walked = _walk(logits, anchor, top_k, tables, block_size=block_size, draft_vocab_size=draft_vocab_size)
    token_ids = ops.result(walked)
    token_ids.output(0).get_tensor().set_names({TOKEN_IDS})
    results, parameters = [token_ids], [logits, anchor, top_k]
    if weights.confidence_weight is not None:
        hidden = ops.parameter([block_size, hidden_size], ov.Type.f32, name=LAST_HIDDEN_STATE)
        previous = ops.concat([anchor, ops.slice(walked, _const(np.array([0])), _const(np.array([block_size - 1])),
                                                 _const(np.array([1])))], 0)
        confidences = ops.result(_confidences(hidden, previous, tables["markov_w1"], weights))
        confidences.output(0).get_tensor().set_names({CONFIDENCES})
        results.append(confidences)
        parameters.append(hidden)
    for parameter in parameters:
        parameter.output(0).get_tensor().set_names({parameter.get_friendly_name()})
    return ov.Model(results, parameters, "markov_head")
