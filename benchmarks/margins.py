"""Top-1/top-2 logit margins: how far a target's greedy choice is from a flip, random real-size targets against
the shipped tiny pair.

A margin is the top logit minus the second one at a step. Its ratio to the standard deviation of that step's
logits over the vocabulary is what compares models: multiplying every logit by a factor (scaling the final norm
or the output embedding) multiplies the margins and the rounding errors of reduced precision alike, and leaves
the ratio, so the flips, as they were. Three sources, percentiles of both:

- the shipped tiny pair's target (`utils.models.default_ir_pair`), greedy target-only decoding of the sample
  pages with both prompts, OpenVINO at f32: a trained model;
- the random real-size text model (`benchmarks.real_size_model`), as built, and sharpened with
  `sharpen_margins(input_scale=X)` for each X: next-token logits at every position of a random context,
  PyTorch at f32 (one forward; the real-size model needs ~6 GB).

    python -m benchmarks.margins [--input-scales 8 12 16] [--context N] [--max-new-tokens N] [--json FILE]

Rerun it when the shipped pair changes: the tiny rows are read from whatever pair ships.
"""

from __future__ import annotations

import argparse

import numpy as np

from utils.cli import add_json_option, command_parser, float_between, int_at_least, write_json
from utils.notebook.display import markdown_table

__all__ = ["PERCENTILES", "top_margins", "margin_percentiles", "LogitRecorder", "tiny_pair_logits",
           "random_target_logits", "main"]

PERCENTILES = (10, 25, 50, 75, 90)


def top_margins(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(top-1 minus top-2 logit, that margin over the logits' standard deviation) of every row of [N, V] logits."""
    logits = np.asarray(logits, np.float64)
    if logits.ndim != 2 or logits.shape[1] < 2:
        raise ValueError(f"logits must be [steps, vocabulary >= 2]; got shape {logits.shape}")
    top_two = -np.partition(-logits, 1, axis=1)[:, :2]
    margins = top_two[:, 0] - top_two[:, 1]
    return margins, margins / logits.std(axis=1)


def margin_percentiles(logits: np.ndarray, percentiles: tuple[int, ...] = PERCENTILES) -> dict:
    """{"steps": N, "margin": {p: value}, "relative": {p: value}} of [N, V] logits (`top_margins`)."""
    margins, relative = top_margins(logits)
    return {"steps": len(margins),
            "margin": dict(zip(percentiles, np.percentile(margins, percentiles).tolist())),
            "relative": dict(zip(percentiles, np.percentile(relative, percentiles).tolist()))}


class LogitRecorder:
    """A `LanguageModelSession` that keeps the logits its `prefill` and `decode_one` return (target-only decoding
    calls nothing else); every other attribute is the session's."""

    def __init__(self, session):
        self.session, self.logits = session, []

    def prefill(self, inputs_embeds):
        logits, hidden = self.session.prefill(inputs_embeds)
        self.logits.append(logits)
        return logits, hidden

    def decode_one(self, embeds):
        logits, hidden = self.session.decode_one(embeds)
        self.logits.append(logits)
        return logits, hidden

    def __getattr__(self, name):
        return getattr(self.session, name)


def tiny_pair_logits(*, max_new_tokens: int) -> np.ndarray:
    """[steps, V] logits of the shipped tiny target's greedy target-only steps on the sample pages (both prompts,
    f32; the step that writes each answer's end is included)."""
    from utils.engine.decoder import SpeculativeDecoder
    from utils.pages.samples import SAMPLE_PROMPTS
    from utils.pages.reading_pages import sample_pages
    from utils.models import default_ir_pair
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    pipeline = SpeculativeOcrPipeline(default_ir_pair()[0], device="CPU", precision="f32")
    recorder = LogitRecorder(pipeline.language_model)
    decoder = SpeculativeDecoder(recorder, pipeline.embed, stop_token_ids=pipeline.eos_token_ids)
    for page in sample_pages():
        for prompt in SAMPLE_PROMPTS:
            decoder.generate(pipeline.prompt_embeddings(page.image, prompt), max_new_tokens=max_new_tokens)
    return np.stack(recorder.logits)


def random_target_logits(*, input_scale: float | None, context: int, seed: int = 0) -> np.ndarray:
    """[context, V] next-token logits at every position of a random context of the random real-size text model,
    sharpened with `input_scale` (None: as built), PyTorch f32."""
    import torch

    from benchmarks.real_size_model import build_random_text_model, sharpen_margins

    model = build_random_text_model(seed=seed)
    if input_scale is not None:
        sharpen_margins(model, input_scale=input_scale)
    input_ids = np.random.default_rng(seed).integers(model.config.vocab_size, size=(1, context))
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(input_ids)).logits[0].numpy()


def _row(source: str, figures: dict) -> dict:
    return {"source": source, "steps": figures["steps"]} | {
        f"{kind}_p{p}": value for kind in ("margin", "relative") for p, value in figures[kind].items()}


def print_table(rows: list[dict]) -> None:
    """The rows as a markdown table: margins (logits) and relative margins (over the logits' std), percentiles."""
    kinds = {f"{'margin' if kind == 'margin' else 'margin/std'} p{p}": f"{kind}_p{p}"
             for kind in ("margin", "relative") for p in PERCENTILES}
    table = [{"source": row["source"], "steps": row["steps"]}
             | {column: f"{row[key]:.3f}" for column, key in kinds.items()} for row in rows]
    print("\n" + markdown_table(table, right=set(table[0]) - {"source"}))


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser("benchmarks.margins", __doc__)
    parser.add_argument("--input-scales", metavar="X", type=float_between(1.0, 1000.0), nargs="*", default=[16.0],
                        help="sharpened random targets to measure besides the one as built (sharpen_margins)")
    parser.add_argument("--context", metavar="N", type=int_at_least(2), default=512,
                        help="random context tokens of the real-size model (one margin per position)")
    parser.add_argument("--max-new-tokens", metavar="N", type=int_at_least(1), default=64,
                        help="the most tokens the tiny target writes per page and prompt")
    add_json_option(parser, what="the percentiles")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Measures the tiny pair's and the random targets' margins and prints their percentiles."""
    args = _parse_args(argv)
    rows = [_row("shipped tiny pair (greedy on the sample pages)",
                 margin_percentiles(tiny_pair_logits(max_new_tokens=args.max_new_tokens)))]
    for scale in [None, *args.input_scales]:
        name = "random real-size target" + ("" if scale is None else f", input_scale {scale:g}")
        rows.append(_row(name, margin_percentiles(random_target_logits(input_scale=scale, context=args.context))))
        print(f"measured {name}", flush=True)
    print_table(rows)
    if args.json:
        settings = {key: str(value) if key == "json" else value for key, value in vars(args).items()}
        write_json(args.json, {"settings": settings, "percentiles": list(PERCENTILES), "rows": rows})


if __name__ == "__main__":
    main()
