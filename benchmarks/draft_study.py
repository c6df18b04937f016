"""How far a tiny pair's draft gets along its block, before any engine: the figure a draft recipe is judged by.

    python -m benchmarks.draft_study [--pair DIR] [--pages N] [--json FILE]

The target reads the held-out generated pages and the pages written by hand (those `benchmarks.mechanisms` reads)
greedily through PyTorch, and the draft runs at every anchor of its answers, teacher-forced, nothing cut
(`utils.tiny.block_acceptance`): acceptance at each block position given the positions before it, with the Markov
walk and with the per-position argmax, the tokens per step of a decoder that verifies every block in full, and how
well the confidence head and the draft's own probability rank the rejected drafts (`rank_confidence`). It needs no
export and reads a draft in minutes, so draft recipes are compared on it; `benchmarks.mechanisms` gives the
figures at the command line's defaults. Without `--pair` it measures the shipped pair. f32, single-threaded: the
figures are the same on every run of one machine.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.tiny_pair_options import HELD_OUT_PAGES, add_held_out_pages_option, add_pair_option
from utils.cli import add_json_option, command_parser, write_json

__all__ = ["draft_study", "main"]


def draft_study(pair: Path, *, pages: int = HELD_OUT_PAGES) -> dict:
    """The figures of the module docstring for the pair folder `pair` (target/, draft/)."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from utils.checkpoint.draft import TargetSpec
    from utils.pages.reading_pages import reading_pages
    from utils.pages.typewriter import PAGE_CELLS
    from utils.pages.written_pages import written_pages
    from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT
    from utils.reference.modeling import load_reference_draft
    from utils.tiny.block_acceptance import acceptance_along_block
    from utils.tiny.confidence import rank_confidence
    from utils.tiny.distill_data import collect_sequences
    from utils.tiny.training import quiet_single_thread

    with quiet_single_thread(), torch.no_grad():
        target = AutoModelForImageTextToText.from_pretrained(pair / "target").eval()
        processor = AutoProcessor.from_pretrained(pair / "target")
        draft = load_reference_draft(pair / "draft", target=TargetSpec.from_folder(pair / "target")).eval()
        images = [page.image for page in reading_pages(pages, seed=0, split="held-out") + written_pages()]
        sequences = collect_sequences(target, processor, [(image, DEFAULT_PROMPT) for image in images],
                                      hidden_layer_ids=draft.config.target_layer_ids, max_new_tokens=PAGE_CELLS)
        embed_tokens = target.get_input_embeddings()
        return {"pages": len(images), "block_size": draft.config.block_size,
                "along_block": acceptance_along_block(draft, embed_tokens, sequences),
                "confidence": rank_confidence(draft, embed_tokens, sequences)}


def _report(figures: dict) -> str:
    lines = [f"{figures['pages']} pages, every anchor, {figures['block_size']} drafts a block, nothing cut:"]
    for way, along in figures["along_block"].items():
        rates = " ".join(f"{rate:.2f}" for rate in along["rate"])
        lines.append(f"  {way}: {along['tokens_per_step']:.2f} tokens per step over {along['anchors']} anchors; "
                     f"acceptance by block position: {rates}")
    confidence = figures["confidence"]
    lines.append(f"  confidence head AUC {confidence['auc']}, the draft's own probability "
                 f"{confidence['auc_of_draft_probability']}, over {confidence['rejected']} rejected of "
                 f"{confidence['positions']} scored drafts")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = command_parser("benchmarks.draft_study", __doc__.split("\n\n", 1)[1])
    add_pair_option(parser)
    add_held_out_pages_option(parser)
    add_json_option(parser, what="the figures")
    args = parser.parse_args(argv)
    from utils.tiny.pair import SHIPPED_PAIR_DIR

    pair = args.pair or SHIPPED_PAIR_DIR
    figures = draft_study(pair, pages=args.pages)
    print(f"{pair}: {_report(figures)}")
    if args.json:
        write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
