"""How far can a confidence cut reach? Drafts saved against tokens lost, for the head and for the draft itself.

A step verifies the leading drafts whose confidence reaches the threshold, so a cut saves the verification of
drafts that would be rejected and loses the accepted ones after it. Issue 35 asked the default threshold for 20%
fewer drafts verified at no more than 2% fewer tokens per step. A cut that knew the future would verify the
accepted drafts only; the best threshold of each signal under the token cap shows how much of that it takes:

- the confidence head, what the decoder cuts on;
- the draft's own probability of its token (the softmax of `U_k + W2 @ W1[prev_k]`), the soft label the head is
  calibrated to (`utils.tiny.confidence`), which the published head, one linear layer, cannot compute;
- the running product of either: the chance that the whole prefix is accepted;
- the oracle: 1 for the accepted drafts, 0 after them.

The steps are the decoder's own: the PyTorch reference (f32, every draft verified, `speculative_generate`) reads
held-out generated pages, then pages of random printable ASCII (where the shipped draft is still rejected now and
then: on generated pages it hardly ever is), with the shipped tiny pair and its default prompt; every threshold is
then replayed on those steps (`replay_threshold`). Figures of the shipped files at f32, the same on every machine
up to float rounding.

    python -m benchmarks.confidence_reach [--pages 40] [--random-pages 20] [--loss 0.02] [--json FILE]
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from utils.cli import add_json_option, command_parser, float_between, int_at_least, write_json
from utils.engine.proposal import Proposal
from utils.engine.timing import StageTimer
from utils.engine.verification import StepRecord
from utils.evaluation.acceptance import confidence_auc, replay_threshold, scored_positions
from utils.notebook.display import markdown_table
from utils.reference.markov import propose
from utils.reference.speculative import DSparkDrafter
from utils.tiny.anchor_batch import draft_index_of

__all__ = ["ProbabilityRecordingDrafter", "signals", "reach", "read_held_out_pages", "main"]

THRESHOLDS = np.round(np.arange(0.0, 1.0, 0.005), 3)


class ProbabilityRecordingDrafter(DSparkDrafter):
    """The reference drafter, keeping for every proposal the draft's own probability of each token it proposes."""

    def reset(self) -> None:
        super().reset()
        self.probabilities: list[tuple[float, ...]] = []

    @torch.no_grad()
    def propose(self, anchor: int, context: torch.Tensor, *, num_tokens: int, timer: StageTimer) -> Proposal:
        hidden = self.block_hidden(anchor, context)
        proposal = propose(self.model, hidden, anchor=anchor, num_tokens=num_tokens,
                           markov_head_top_k=self.markov_head_top_k)
        previous = torch.tensor((anchor, *proposal.target_ids[:-1]))
        chosen = draft_index_of(self.model)[torch.tensor(proposal.target_ids)]
        logits = self.model.logits(hidden[0, :num_tokens]) + self.model.markov_bias(previous)
        self.probabilities.append(tuple(logits.softmax(-1).gather(-1, chosen[:, None])[:, 0].tolist()))
        return proposal


def _with_confidences(steps: list[StepRecord], confidences: list[tuple[float, ...]]) -> list[StepRecord]:
    return [dataclasses.replace(step, confidences=tuple(map(float, scores)))
            for step, scores in zip(steps, confidences, strict=True)]


def signals(steps: list[StepRecord], probabilities: list[tuple[float, ...]]) -> dict[str, list[StepRecord]]:
    """The drafting steps (every draft verified) scored by each signal: name -> steps with those confidences."""
    drafting = [step for step in steps if step.drafted]
    oracle = [tuple(float(index < step.matched_drafts) for index in range(len(step.drafted))) for step in drafting]
    head = [step.confidences for step in drafting]
    return {"confidence head": drafting,
            "confidence head, running product": _with_confidences(drafting, [np.cumprod(c) for c in head]),
            "draft's own probability": _with_confidences(drafting, probabilities),
            "draft's own probability, running product":
                _with_confidences(drafting, [np.cumprod(p) for p in probabilities]),
            "oracle": _with_confidences(drafting, oracle)}


def _cut(steps: list[StepRecord], threshold: float) -> dict:
    """The share of drafts a threshold saves and of tokens per step it loses."""
    replay = replay_threshold(steps, threshold)
    tokens = replay["accepted drafts"] + replay["steps"]
    return {"threshold": threshold,
            "fewer drafts": 1 - replay["drafts verified at threshold"] / replay["drafts verified"],
            "fewer tokens": replay["accepted drafts lost"] / tokens}


def reach(steps: list[StepRecord], *, loss: float, default_threshold: float) -> dict:
    """One signal's AUC, its cut at `default_threshold`, and its best threshold losing at most `loss` of the tokens
    per step (the one saving the most drafts; the lowest such threshold on a tie)."""
    scores, accepted = scored_positions(steps)
    cuts = [_cut(steps, threshold) for threshold in THRESHOLDS]
    best = max((cut for cut in cuts if cut["fewer tokens"] <= loss), key=lambda cut: cut["fewer drafts"])
    return {"auc": confidence_auc(scores, accepted), "at default": _cut(steps, default_threshold), "best": best}


def read_held_out_pages(pages: int, random_pages: int = 0) -> tuple[list[StepRecord], list[tuple[float, ...]]]:
    """The reference decoder's steps on `pages` held-out generated pages, then `random_pages` of random printable
    ASCII (shipped pair, default prompt, f32, every draft verified), and the draft's own probability of each
    proposed token, per drafting step."""
    from tqdm.auto import tqdm
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from utils.checkpoint.draft import TargetSpec
    from utils.pages.reading_pages import reading_pages
    from utils.pages.typewriter import PAGE_CELLS
    from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT
    from utils.reference.modeling import load_reference_draft
    from utils.reference.speculative import TargetRunner, speculative_generate
    from utils.tiny import SHIPPED_PAIR_DIR
    from utils.tiny.distill_data import prompt_inputs

    root = SHIPPED_PAIR_DIR
    target = AutoModelForImageTextToText.from_pretrained(root / "target").eval()
    processor = AutoProcessor.from_pretrained(root / "target")
    draft = load_reference_draft(root / "draft", target=TargetSpec.from_folder(root / "target")).eval()
    runner = TargetRunner(target, hidden_layer_ids=draft.config.target_layer_ids)
    steps, probabilities = [], []
    read = [*reading_pages(pages, seed=0, split="held-out"),
            *reading_pages(random_pages, seed=0, split="held-out", kinds=("random",))]
    for page in tqdm(read, desc="reading held-out pages"):
        drafter = ProbabilityRecordingDrafter(draft, target.get_input_embeddings())
        result = speculative_generate(runner, drafter, prompt_inputs(processor, page.image, DEFAULT_PROMPT),
                                      max_new_tokens=PAGE_CELLS, num_assistant_tokens=draft.config.block_size,
                                      eos_token_ids=(target.generation_config.eos_token_id,))
        steps += result.steps
        probabilities += drafter.probabilities
    return steps, probabilities


def main(argv: list[str] | None = None) -> None:
    from utils.engine.decoder import DEFAULT_CONFIDENCE_THRESHOLD

    parser = command_parser("benchmarks.confidence_reach", __doc__.split("\n\n", 1)[1])
    parser.add_argument("--pages", metavar="N", type=int_at_least(1), default=40, help="held-out generated pages")
    parser.add_argument("--random-pages", metavar="N", type=int_at_least(0), default=20,
                        help="held-out pages of random printable ASCII, read after them")
    parser.add_argument("--loss", metavar="X", type=float_between(0.0, 1.0), default=0.02,
                        help="the share of tokens per step a cut may lose")
    add_json_option(parser, what="the figures")
    args = parser.parse_args(argv)
    steps, probabilities = read_held_out_pages(args.pages, args.random_pages)
    figures = {name: reach(scored, loss=args.loss, default_threshold=DEFAULT_CONFIDENCE_THRESHOLD)
               for name, scored in signals(steps, probabilities).items()}
    drafting = [step for step in steps if step.drafted]
    print(f"{args.pages} held-out pages and {args.random_pages} of random ASCII, {len(drafting)} drafting steps, "
          f"{np.mean([step.matched_drafts for step in drafting]):.2f} of {len(drafting[0].drafted)} drafts accepted "
          f"per step (PyTorch reference, f32, every draft verified)")
    at_default = f"at threshold {DEFAULT_CONFIDENCE_THRESHOLD}: fewer drafts / fewer tokens"
    table = [{"signal": name, "AUC": f"{figure['auc']:.3f}",
              at_default: f"{figure['at default']['fewer drafts']:.1%} / {figure['at default']['fewer tokens']:.1%}",
              f"best threshold losing <= {args.loss:.0%}": f"{figure['best']['threshold']:g}",
              "fewer drafts": f"{figure['best']['fewer drafts']:.1%}",
              "fewer tokens": f"{figure['best']['fewer tokens']:.1%}"} for name, figure in figures.items()]
    print(markdown_table(table, right=set(table[0]) - {"signal"}))
    if args.json:
        write_json(args.json, {"pages": args.pages, "random_pages": args.random_pages, "loss": args.loss,
                               "steps": len(drafting), "signals": figures})


if __name__ == "__main__":
    main()
