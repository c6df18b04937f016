"""INT4 against INT8 target weights: speed and agreement at real size, and the tiny reader's CER.

openvino_notebooks compress LLMs to INT4 by default; the seed PR exports an INT8 target. Whether the suite should
follow either is measured here, in one run:

1. At real size, the random sharpened target of `benchmarks.cpu_speedup` exported INT8 and INT4 (group-wise
   INT4_ASYM, `lm_head` INT8: `utils.export.compression`), at the device's default precision (bf16 here):
   target-only decoding and speculative decoding with the int4 draft at forced acceptance 5.47 (upstream's
   tokens per step, 15 drafts), per context, formats and configurations interleaved round by round. The INT4
   target's greedy tokens are compared with the INT8 target's after the same context: the share of tokens
   before the first difference, and the INT8 step's relative margin there (`benchmarks.margins`).
2. The shipped tiny reader, its target compressed INT8 and INT4 from the fp32 export, target-only at the
   default precision on held-out generated pages: CER against the truth, and answers equal to the INT8 target's.

    python -m benchmarks.target_formats [--contexts 1024 3072] [--new-tokens 64] [--rounds 3] [--pages 40]

Artefacts are cached in --work with those of `benchmarks.cpu_speedup` (the INT4 export takes a few minutes).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.cpu_speedup import INPUT_SCALE, UPSTREAM_TAU, greedy_reference
from benchmarks.harness import (BLOCK_SIZE, WARM_UP_CONTEXT, TableEmbeddings, add_contexts_option, add_rounds_option,
                                add_work_option, interleaved_rounds, prepare_draft, prepare_target)
from benchmarks.real_size_model import VERIFY_LENGTH
from benchmarks.stand_ins import ForcedAcceptanceProposer, StepCounters, summarize, tau_schedule
from utils.cli import command_parser, int_at_least
from utils.evaluation.compare import first_difference
from utils.notebook.display import markdown_table

FORMATS = ("int8", "int4")


def measure_real_size(work: Path, *, contexts: list[int], new_tokens: int, rounds: int, seed: int = 0) -> list[dict]:
    """One row per (context, format, configuration): ms per step, tokens per second, speedup over the same format's
    target-only decoding; target-only rows also give their agreement with the INT8 target's tokens."""
    from utils.engine.decoder import SpeculativeDecoder
    from utils.engine.device import compile_properties
    from utils.engine.draft import DSparkProposer
    from utils.engine.language_model import LanguageModelSession

    targets = {fmt: prepare_target(work, fmt, input_scale=INPUT_SCALE) for fmt in FORMATS}
    embed = TableEmbeddings.of(targets["int8"])
    properties = compile_properties("CPU", precision="default")
    sessions = {fmt: LanguageModelSession(folder, properties=properties,
                                          max_length=max(contexts) + new_tokens + 4 * VERIFY_LENGTH)
                for fmt, folder in targets.items()}
    draft = DSparkProposer.load(prepare_draft(work, "int4"), "CPU", properties=properties, embed=embed)
    rng, vocab_size = np.random.default_rng(seed), embed.table.shape[0]
    setups, rows = {}, []
    for context in contexts:
        context_embeds = embed(rng.integers(vocab_size, size=context))
        references = {fmt: greedy_reference(session, embed, context_embeds, new_tokens + VERIFY_LENGTH)
                      for fmt, session in sessions.items()}
        for fmt, session in sessions.items():
            proposer = ForcedAcceptanceProposer(draft, references[fmt][0], schedule=tau_schedule(UPSTREAM_TAU),
                                                vocab_size=vocab_size)
            configs = {"target only": StepCounters(SpeculativeDecoder(session, embed, stop_token_ids=())),
                       "draft int4, forced": StepCounters(SpeculativeDecoder(session, embed, stop_token_ids=(),
                                                                             proposer=proposer,
                                                                             block_size=BLOCK_SIZE))}
            for counters in configs.values():  # warm-up: every call length once
                counters.run(context_embeds[:WARM_UP_CONTEXT], 2 * VERIFY_LENGTH)
            setups[(context, fmt)] = configs
        int8_tokens, int8_margins = references["int8"]
        first = first_difference(references["int4"][0], int8_tokens)
        agreement = {"int8": 1.0, "int4": (len(int8_tokens) if first is None else first) / len(int8_tokens)}
        margin = {"int8": None, "int4": None if first is None else float(int8_margins[first])}
        steps = {key: [] for key in ((context, fmt, name) for fmt in FORMATS for name in setups[(context, fmt)])}
        for _, (context_, fmt, name) in interleaved_rounds(list(steps), rounds):
            run_steps = setups[(context_, fmt)][name].run(context_embeds, new_tokens)[1]
            steps[(context_, fmt, name)] += run_steps if name == "target only" else run_steps[1:]
        for fmt in FORMATS:
            baseline = summarize(steps[(context, fmt, "target only")])
            for name in setups[(context, fmt)]:
                summary = summarize(steps[(context, fmt, name)])
                rows.append({"context": context, "target": fmt, "configuration": name,
                             "tokens_per_step": summary["tau"], "target_ms": summary["target_ms"],
                             "step_ms": 1000 * statistics.fmean(step["wall"] for step in steps[(context, fmt, name)]),
                             "tokens_per_s": summary["tokens_per_s"],
                             "speedup": summary["tokens_per_s"] / baseline["tokens_per_s"],
                             "agreement_with_int8": agreement[fmt], "margin_at_first_difference": margin[fmt]})
    return rows


def measure_tiny_reader(*, pages: int) -> dict:
    """{format: {"cer", "equal to int8"}} of the shipped tiny target read target-only at the default precision."""
    from utils.evaluation.character_error_rate import character_error_rate
    from utils.pages.reading_pages import reading_pages
    from utils.export.compression import compress_folder
    from utils.export.target import export_target
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline
    from utils.tiny import default_pair

    pair, held_out = default_pair(), reading_pages(pages, seed=0, split="held-out")
    figures, texts = {}, {}
    with tempfile.TemporaryDirectory() as folder:
        fp32 = export_target(pair.target, Path(folder) / "fp32", draft=pair.draft)
        for fmt in FORMATS:
            target = compress_folder(fp32, Path(folder) / fmt, weight_format=fmt)
            pipeline = SpeculativeOcrPipeline(target, device="CPU")
            texts[fmt] = [pipeline.generate(page.image).texts[0] for page in held_out]
            figures[fmt] = {"cer": character_error_rate(zip(texts[fmt], (page.text for page in held_out)))}
    for fmt in FORMATS:
        figures[fmt]["equal to int8"] = sum(a == b for a, b in zip(texts[fmt], texts["int8"]))
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = command_parser("benchmarks.target_formats", __doc__.split("\n\n", 1)[1])
    add_work_option(parser)
    add_contexts_option(parser)
    parser.add_argument("--new-tokens", metavar="N", type=int_at_least(1), default=64)
    add_rounds_option(parser)
    parser.add_argument("--pages", metavar="N", type=int_at_least(1), default=40,
                        help="held-out pages the tiny reader reads per format")
    args = parser.parse_args(argv)
    reader = measure_tiny_reader(pages=args.pages)
    print(f"tiny reader, target only at the default precision, {args.pages} held-out pages:")
    for fmt, figures in reader.items():
        print(f"  {fmt}: CER {figures['cer']:.2%}, answers equal to int8 {figures['equal to int8']} of {args.pages}")
    rows = measure_real_size(args.work, contexts=args.contexts, new_tokens=args.new_tokens, rounds=args.rounds)
    table = [{"context": row["context"], "target": row["target"], "configuration": row["configuration"],
              "tokens/step": f"{row['tokens_per_step']:.2f}", "step (ms)": f"{row['step_ms']:.1f}",
              "target (ms)": f"{row['target_ms']:.1f}", "tok/s": f"{row['tokens_per_s']:.1f}",
              "speedup": f"{row['speedup']:.2f}x", "agreement with int8": f"{row['agreement_with_int8']:.1%}",
              "margin at first difference": None if row["margin_at_first_difference"] is None
              else f"{row['margin_at_first_difference']:.3f}"} for row in rows]
    print("\n" + markdown_table(table, right=set(table[0]) - {"target", "configuration"}))


if __name__ == "__main__":
    sys.exit(main())
