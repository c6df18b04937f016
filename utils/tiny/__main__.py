"""Command line: `python -m utils.tiny --out DIR [--seed N] [--draft-vocab-size N] ... [--pretrain | --read [--merges]]
[--distill] [--manifest]`.

The shipped default pair (`utils/tiny/default`) is `--read --distill --manifest` with the defaults
(`utils.tiny.manifest.REBUILD_COMMAND`): `--read` trains a target that reads typewriter pages, with the sizes of
`READING_PAIR` unless an option names another, and `--read --distill` distils its draft as `READING_DISTILL` says.
`--read --merges` builds a pair in the real pair's regime (`MERGING_PAIR`): a tokenizer with merges, a draft of half
its vocabulary and 15 drafts a block; the reader of one token per character (trained, or the one of `--reader-from`)
learns to write merged tokens of rows without their trailing spaces, and the draft distils on those pages.
`--pretrain` is the earlier recipe, a target that writes corpus text whatever the page (small and fast: the
tests build such pairs).
"""

from __future__ import annotations

import sys

from utils.cli import command_parser, float_between, int_at_least
from utils.files import folder_size
from utils.tiny.config import (MERGING_DISTILL, MERGING_PAIR, MERGING_READ, READING_DISTILL, READING_PAIR,
                               Checkpoints)
from utils.tiny.manifest import HELD_OUT_WALKS, MANIFEST, write_manifest
from utils.tiny.pair import DistillConfig, PretrainConfig, ReaderConfig, TinyPairConfig, build_tiny_pair
from utils.tiny.reading_report import reading_report_summary


def main(argv: list[str] | None = None) -> int:
    defaults = TinyPairConfig()
    parser = command_parser("utils.tiny", __doc__.split("\n\n", 1)[1])
    count = int_at_least(1)
    parser.add_argument("--out", metavar="DIR", required=True, help="folder that receives target/ and draft/")
    parser.add_argument("--seed", metavar="N", type=int_at_least(0), default=defaults.seed, help="the random seed")
    parser.add_argument("--tokenizer-vocab-size", metavar="N", type=count,
                        help=f"tokens of the trained BPE tokenizer (default: {defaults.tokenizer_vocab_size}, with "
                             f"--read {READING_PAIR['tokenizer_vocab_size']}: one token per character)")
    parser.add_argument("--vocab-size", metavar="N", type=count,
                        help="target embedding rows (default: the tokenizer's, padded)")
    parser.add_argument("--draft-vocab-size", metavar="N", type=count,
                        help=f"the draft's pruned vocabulary (default: {defaults.draft_vocab_size}, with --read "
                             f"{READING_PAIR['draft_vocab_size']})")
    parser.add_argument("--block-size", metavar="N", type=count,
                        help=f"draft tokens per block (default: {defaults.block_size}, with --merges "
                             f"{MERGING_PAIR['block_size']})")
    parser.add_argument("--target-layer-ids", metavar="N", type=int_at_least(0), nargs="+",
                        default=list(defaults.target_layer_ids), help="target layers the draft reads")
    parser.add_argument("--markov-rank", metavar="N", type=count, default=defaults.markov_rank,
                        help="rank r of the Markov head")
    training = parser.add_mutually_exclusive_group()
    training.add_argument("--pretrain", action="store_true",
                          help="train the target to write corpus text first (learnable answers, about a minute on CPU)")
    training.add_argument("--read", action="store_true",
                          help="train the target to read typewriter pages, with the sizes of READING_PAIR (about "
                               "64 minutes on two CPU cores with the defaults; prints its CER and learning curve)")
    parser.add_argument("--merges", action="store_true",
                        help="with --read: a tokenizer with merges, a draft of half its vocabulary and 15 drafts a "
                             "block, as the real pair; the reader learns merged tokens of unpadded rows after reading "
                             "one token per character")
    parser.add_argument("--merge-steps", metavar="N", type=count,
                        help=f"training steps of --merges (default: {MERGING_READ['merge_steps']})")
    parser.add_argument("--pretrain-steps", metavar="N", type=count, default=PretrainConfig().steps,
                        help="training steps of --pretrain")
    parser.add_argument("--read-steps", metavar="N", type=count, default=ReaderConfig().steps,
                        help="training steps of --read")
    parser.add_argument("--refine-steps", metavar="N", type=int_at_least(0), default=ReaderConfig().refine_steps,
                        help="refining steps of --read on look-alike glyphs and repeating rows, after --read-steps")
    parser.add_argument("--reader-from", metavar="DIR",
                        help="with --read: start from the reader of the pair in DIR, trained as the first phase of "
                             "--read (checked), and only refine it: the same bits as a whole training on the CPU "
                             "that trained it, in 47 minutes less; with --merges: the reader of one token per "
                             "character that learns the merges (the shipped pair's reader, say)")
    parser.add_argument("--read-held-out-pages", metavar="N", type=count, default=ReaderConfig().held_out_pages,
                        help="held-out pages each point of the reading's learning curve reads")
    parser.add_argument("--distill", action="store_true",
                        help="train the draft on the target's greedy answers (about a minute on CPU)")
    parser.add_argument("--distill-steps", metavar="N", type=count,
                        help=f"training steps of --distill (default: {DistillConfig().steps}, with --read "
                             f"{READING_DISTILL['steps']})")
    parser.add_argument("--distill-pages", metavar="N", type=count,
                        help=f"generated training pages of --distill (default: {DistillConfig().pages}, with --read "
                             f"{READING_DISTILL['pages']})")
    parser.add_argument("--distill-unmoved-share", metavar="P", type=float_between(0.0, 1.0),
                        help="share of the typewriter pages --distill trains on with no glyph moved in its cell, as "
                             f"users' pages have them (default: {DistillConfig().unmoved_share}, with --read "
                             f"{READING_DISTILL['unmoved_share']}: docs/tiny-pair.md)")
    parser.add_argument("--manifest", action="store_true",
                        help="measure the pair on held-out pages (PyTorch reference, and for a reader OpenVINO at "
                             "the CLI's defaults) and write manifest.json (hashes and figures)")
    parser.add_argument("--checkpoint-dir", metavar="DIR",
                        help="the reader's and the draft's trainings save a checkpoint there every "
                             f"{Checkpoints.every} steps, and resume from one of the same options: run the same "
                             "command again to go on with a build that was cut short")
    parser.add_argument("--overwrite", action="store_true", help="rebuild even if the --out folder holds a pair")
    args = parser.parse_args(argv)
    if args.merges and not args.read:
        parser.error("--merges needs --read (a reader learns the merges)")
    if args.merge_steps is not None and not args.merges:
        parser.error("--merge-steps needs --merges")
    try:
        sizes = (dict(READING_PAIR) if args.read else {}) | (MERGING_PAIR if args.merges else {})
        sizes |= {name: getattr(args, name) for name in ("tokenizer_vocab_size", "draft_vocab_size", "block_size")
                  if getattr(args, name) is not None}
        config = TinyPairConfig(seed=args.seed, vocab_size=args.vocab_size,
                                target_layer_ids=tuple(args.target_layer_ids), markov_rank=args.markov_rank, **sizes)
        pretrain = PretrainConfig(steps=args.pretrain_steps) if args.pretrain else None
        merges = (MERGING_READ | ({"merge_steps": args.merge_steps} if args.merge_steps else {})) if args.merges else {}
        read = ReaderConfig(steps=args.read_steps, refine_steps=args.refine_steps,
                            held_out_pages=args.read_held_out_pages, **merges) if args.read else None
        distill_options = (dict(READING_DISTILL) if args.read else {}) | (MERGING_DISTILL if args.merges else {})
        distill_options |= {name: getattr(args, f"distill_{name}") for name in ("steps", "pages", "unmoved_share")
                            if getattr(args, f"distill_{name}") is not None}
        distill = DistillConfig(**distill_options) if args.distill else None
        pair = build_tiny_pair(args.out, config, pretrain=pretrain, read=read, distill=distill,
                               reader_from=args.reader_from, checkpoint_dir=args.checkpoint_dir,
                               overwrite=args.overwrite)
    except (ValueError, FileExistsError, FileNotFoundError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    verb = f"built in {pair.seconds:.1f} s" if pair.seconds else "already built"
    trained = ", ".join(part for part, how in (("pretrained target", pair.pretrain), ("reading target", pair.read),
                                               ("distilled draft", pair.distill)) if how)
    print(f"tiny pair {verb}: {pair.root}" + (f" ({trained})" if trained else ""))
    for part in (pair.target, pair.draft):
        print(f"  {part.name:<7} {folder_size(part) / 1e6:6.2f} MB  {part}")
    if pair.reading is not None:
        from utils.tiny.reader import reading_summary

        print(reading_summary(pair.reading))
    if args.manifest:
        training = {"reading": pair.reading.as_dict()} if pair.reading is not None else None
        manifest = write_manifest(pair.root, training=training)
        for walk in HELD_OUT_WALKS:
            figures = manifest["held_out"][walk]
            print(f"  held out, {walk}: {figures['tokens_per_step']:.2f} tokens per step, "
                  f"{figures['rejected_share']:.1%} of drafts rejected, confidence AUC {figures['confidence_auc']}")
        if "reading" in manifest:
            print(reading_report_summary(manifest["reading"]))
        print(f"  wrote {pair.root / MANIFEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
