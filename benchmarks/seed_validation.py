"""The seed's own validation, one command away.

    python -m benchmarks.seed_validation [--device D] [--models DIR] [--pages-dir DIR] [--precision P]
                                         [--max-new-tokens N] [--repeats N] [--out results.json]

Online, as the seed PR measured: downloads `openbmb/MiniCPM-OCR-1.0` and its DSpark draft, exports an int8 target
and the draft in 16 bits (the published bf16, stored as fp16), int8 and int4, downloads one OmniDocBench page
per document category (8 pages, `utils.pages.omnidocbench` says which), runs greedy with up to 2048 new
tokens and `num_assistant_tokens=15`, every draft verified (upstream has no confidence threshold), and prints
the seed's table with upstream's Arc B390 figures beside ours. Offline it says in one line why it cannot, and
runs the same table on the tiny pair and the sample pages instead.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from utils.cli import add_json_option, command_parser, int_at_least, write_json
from utils.engine.device import PRECISIONS
from utils.evaluation.benchmark import BenchConfig, run_benchmark
from utils.evaluation.seed_figures import SEED_MAX_NEW_TOKENS, SEED_NUM_ASSISTANT_TOKENS, seed_comparison

__all__ = ["SeedRun", "seed_run", "run_seed_validation", "main"]

_SEED_WEIGHTS = {"fp16": "bf16", "fp32": "bf16", "int8": "int8", "int4": "int4"}  # our format -> the seed's row


def _tiny_pair(models: Path | None) -> tuple[Path, dict[str, Path]]:
    """The tiny target and its draft in fp32, int8 and int4 (compressed once, as notebook 06 does)."""
    from utils.export.compression import compress_folder
    from utils.models import default_ir_pair, derived_ir_folder

    target, draft = default_ir_pair(models)
    drafts = {"fp32": draft}
    for weight_format in ("int8", "int4"):
        drafts[weight_format] = derived_ir_folder(draft, weight_format, models)
        if not drafts[weight_format].exists():
            compress_folder(draft, drafts[weight_format], weight_format=weight_format)
    return target, drafts


@dataclass(frozen=True)
class SeedRun:
    """What the validation runs on: the real pair and pages when the model hub answers, else the tiny ones."""

    target: Path
    drafts: dict[str, Path]  # draft weight format -> draft IR folder, the 16-bit (or fp32) reference first
    pages: list
    num_assistant_tokens: int | None  # the seed's 15; None: the tiny draft's own block size
    note: str  # one line: which models and pages, and why


def seed_run(models: Path | None = None, pages_dir: Path | None = None) -> SeedRun:
    """The real pair and 8 OmniDocBench pages (downloaded and exported once), or, offline, the tiny stand-ins."""
    from utils.models import hub_unreachable_reason, models_dir, real_ir_pair

    reason = hub_unreachable_reason()
    if reason is not None:
        from utils.pages.reading_pages import sample_pages

        target, drafts = _tiny_pair(models)
        return SeedRun(target, drafts, sample_pages()[:8], None,
                       f"offline: {reason}; the tiny pair and the sample pages stand in")
    from utils.pages.omnidocbench import download_omnidocbench_pages

    target, drafts = real_ir_pair(models)
    pages = download_omnidocbench_pages(pages_dir or (models or models_dir()) / "OmniDocBench")
    return SeedRun(target, drafts, pages, SEED_NUM_ASSISTANT_TOKENS,
                   f"online: the real pair, {len(pages)} OmniDocBench pages")


def run_seed_validation(*, models: Path | None = None, pages_dir: Path | None = None, device: str | None = None,
                        precision: str = "default", max_new_tokens: int = SEED_MAX_NEW_TOKENS,
                        repeats: int = 1) -> tuple[str, dict]:
    """Runs the seed's configurations and returns (the report in markdown, the results document).

    The configurations: the target alone; each draft format with the Top-K scorer; the 16-bit draft with the
    dense Markov walk; all at `num_assistant_tokens=15` (offline: the tiny draft's block size).
    """
    run = seed_run(models, pages_dir)
    reference = next(iter(run.drafts.values()))
    configs = [BenchConfig(None)]
    configs += [BenchConfig(draft, None, run.num_assistant_tokens) for draft in run.drafts.values()]
    configs += [BenchConfig(reference, 0, run.num_assistant_tokens)]
    results = run_benchmark(run.target, configs, run.pages, max_new_tokens=max_new_tokens, repeats=repeats,
                            device=device, precision=precision, confidence_threshold=0.0)
    weights = {str(folder): _SEED_WEIGHTS[weight_format] for weight_format, folder in run.drafts.items()}
    pages = ", ".join(page.name for page in run.pages)
    report = f"{run.note}\n\npages: {pages}\n\n{seed_comparison(results, weights)}"
    return report, results | {"note": run.note}


def main(argv: list[str] | None = None) -> int:
    parser = command_parser("benchmarks.seed_validation", __doc__)
    parser.add_argument("--device", metavar="DEVICE", help="CPU, GPU or AUTO (default: GPU when present)")
    parser.add_argument("--models", metavar="DIR", type=Path,
                        help="the models folder (default: models/ at the repository root, or $DSPARK_OCR_MODELS)")
    parser.add_argument("--pages-dir", metavar="DIR", type=Path,
                        help="where the OmniDocBench files are kept (default: inside the models folder)")
    parser.add_argument("--precision", choices=PRECISIONS, default="default",
                        help="the target's: default (the device's own, as upstream ran) or f32 (exact)")
    parser.add_argument("--max-new-tokens", metavar="N", type=int_at_least(1), default=SEED_MAX_NEW_TOKENS,
                        help="the most tokens to write per page")
    parser.add_argument("--repeats", metavar="N", type=int_at_least(1), default=1,
                        help="timed runs of each page (the median counts)")
    add_json_option(parser, what="the results")
    args = parser.parse_args(argv)
    report, results = run_seed_validation(models=args.models, pages_dir=args.pages_dir, device=args.device,
                                          precision=args.precision, max_new_tokens=args.max_new_tokens,
                                          repeats=args.repeats)
    if args.json:
        write_json(args.json, results)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
