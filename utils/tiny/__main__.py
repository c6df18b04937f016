"""Command line: `python -m utils.tiny --out DIR [--seed N] [--draft-vocab-size N] ... [--pretrain | --read]
[--distill] [--manifest]`.

The shipped default pair (`utils/tiny/default`) is `--pretrain --distill --manifest` with the defaults. `--read`
trains a target that reads typewriter pages, with the sizes of `READING_PAIR` unless an option names another.
"""

from __future__ import annotations

import argparse
import sys

from utils.files import folder_size
from utils.tiny.manifest import HELD_OUT_WALKS, MANIFEST, write_manifest
from utils.tiny.config import READING_DISTILL, READING_PAIR
from utils.tiny.pair import DistillConfig, PretrainConfig, ReaderConfig, TinyPairConfig, build_tiny_pair
from utils.tiny.reading_report import reading_report_summary


def main(argv: list[str] | None = None) -> int:
    defaults = TinyPairConfig()
    parser = argparse.ArgumentParser(prog="python -m utils.tiny", description=__doc__)
    parser.add_argument("--out", required=True, help="folder that receives target/ and draft/")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--tokenizer-vocab-size", type=int, default=None,
                        help=f"default: {defaults.tokenizer_vocab_size}, with --read "
                             f"{READING_PAIR['tokenizer_vocab_size']} (one token per character)")
    parser.add_argument("--vocab-size", type=int, default=None, help="target embedding rows (default: padded)")
    parser.add_argument("--draft-vocab-size", type=int, default=None,
                        help=f"default: {defaults.draft_vocab_size}, with --read {READING_PAIR['draft_vocab_size']}")
    parser.add_argument("--block-size", type=int, default=defaults.block_size)
    parser.add_argument("--target-layer-ids", type=int, nargs="+", default=list(defaults.target_layer_ids))
    parser.add_argument("--markov-rank", type=int, default=defaults.markov_rank)
    training = parser.add_mutually_exclusive_group()
    training.add_argument("--pretrain", action="store_true",
                          help="train the target to write corpus text first (learnable answers, about a minute on CPU)")
    training.add_argument("--read", action="store_true",
                          help="train the target to read typewriter pages, with the sizes of READING_PAIR (about an "
                               "hour on one CPU thread with the defaults; prints its CER and learning curve)")
    parser.add_argument("--pretrain-steps", type=int, default=PretrainConfig().steps, help="training steps")
    parser.add_argument("--read-steps", type=int, default=ReaderConfig().steps, help="reading training steps")
    parser.add_argument("--read-held-out-pages", type=int, default=ReaderConfig().held_out_pages,
                        help="held-out pages each point of the reading's learning curve reads")
    parser.add_argument("--distill", action="store_true",
                        help="train the draft on the target's greedy answers (about a minute on CPU)")
    parser.add_argument("--distill-steps", type=int, default=DistillConfig().steps, help="training steps")
    parser.add_argument("--distill-pages", type=int, default=DistillConfig().pages, help="generated training pages")
    parser.add_argument("--manifest", action="store_true",
                        help="measure the pair on held-out pages (PyTorch reference and OpenVINO at the CLI's "
                             "defaults) and write manifest.json (hashes and figures)")
    parser.add_argument("--overwrite", action="store_true", help="rebuild even if DIR holds a pair")
    args = parser.parse_args(argv)
    try:
        sizes = dict(READING_PAIR) if args.read else {}
        sizes |= {name: getattr(args, name) for name in ("tokenizer_vocab_size", "draft_vocab_size")
                  if getattr(args, name) is not None}
        config = TinyPairConfig(seed=args.seed, vocab_size=args.vocab_size, block_size=args.block_size,
                                target_layer_ids=tuple(args.target_layer_ids), markov_rank=args.markov_rank, **sizes)
        pretrain = PretrainConfig(steps=args.pretrain_steps) if args.pretrain else None
        read = ReaderConfig(steps=args.read_steps, held_out_pages=args.read_held_out_pages) if args.read else None
        reading_distill = READING_DISTILL if args.read else {}
        distill = (DistillConfig(steps=args.distill_steps, pages=args.distill_pages, **reading_distill)
                   if args.distill else None)
        pair = build_tiny_pair(args.out, config, pretrain=pretrain, read=read, distill=distill,
                               overwrite=args.overwrite)
    except (ValueError, FileExistsError) as error:
        print(f"error: {error}", file=sys.stderr)
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
