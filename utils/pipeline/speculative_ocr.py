"""Speculative OCR on OpenVINO Runtime: MiniCPM-OCR verified against its DSpark draft, without torch.

One `generate` call is the OCR front end, then the decoding engine:

    image -> preprocessing (numpy/PIL) -> vision IR -> features scattered into the prompt embeddings
          -> `utils.engine.decoder.SpeculativeDecoder` (prefill, then draft / verify / accept steps)
          -> tokens -> text (openvino-tokenizers detokenizer), streamed as it is accepted

Without a draft the engine decodes with the target alone (the baseline). Either way the output is the
target's own greedy output, token for token.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from utils.contract.draft import ExportedDraft
from utils.contract.target import ExportedTarget
from utils.engine.decoder import DEFAULT_CONFIDENCE_THRESHOLD, SpeculativeDecoder
from utils.engine.device import compile_properties, inference_precision, resolve_device
from utils.engine.draft import PER_POSITION_ARGMAX, DSparkProposer
from utils.engine.metrics import GenerationMetrics
from utils.engine.proposal import Proposer
from utils.engine.step_cost import StepCost
from utils.engine.timing import StageTimer
from utils.pipeline.preprocessing.image_io import load_rgb_image
from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT

__all__ = ["OcrResult", "SpeculativeOcrPipeline", "TextStreamer", "TYPEWRITER_SLACK"]

TEXT_AND_ANSWER_RESERVE = 1024  # context tokens kept for the prompt's text and the answer beside the image
# A typewriter reader writes one token per image token, so its answer ends by the page's last image token; past
# that and this many more it is lost (an image of another shape), and the reading stops there, not at the budget.
TYPEWRITER_SLACK = 8


class TextStreamer:
    """Turns a growing list of token ids into new text pieces for a callback (holds back incomplete UTF-8)."""

    def __init__(self, detokenize: Callable[[list[int]], str], callback: Callable[[str], object]):
        self.detokenize, self.callback = detokenize, callback
        self.printed = ""

    def put(self, tokens: list[int], *, final: bool = False) -> None:
        """Sends the text added since the last call; a trailing partial character waits unless `final`."""
        text = self.detokenize(tokens)
        if text.endswith("\ufffd") and not final:
            return
        if len(text) > len(self.printed):
            self.callback(text[len(self.printed):])
        self.printed = text


@dataclass
class OcrResult:
    """The answer of one OCR request (field names as OpenVINO GenAI's `VLMDecodedResults`)."""

    texts: list[str]
    tokens: list[int]
    metrics: GenerationMetrics
    drafted: bool = field(default=False)
    notice: str = ""  # one line about what this model cannot read in this image (the tiny pair's reach), or ""

    def get_num_accepted_tokens(self) -> int:
        """Accepted draft tokens over the run (OpenVINO GenAI's name)."""
        return sum(self.metrics.accepted_per_step)


class SpeculativeOcrPipeline:
    """OCR with a MiniCPM-OCR IR folder and, optionally, a DSpark draft IR folder.

    Args:
        target: folder written by `utils.export.export_target`.
        draft: folder written by `utils.export.export_draft` (or its `ExportedDraft`, read once for several
            pipelines), or None for target-only decoding.
        proposer: a stand-in for the draft (tests, engine benchmarks); excludes `draft`.
        block_size: the largest `num_assistant_tokens` a `proposer` serves (a draft brings its own).
        device: `CPU`, `GPU`, `AUTO` or None (GPU when an Intel GPU is present).
        precision: the target's: "f32" (exact: the output equals target-only decoding token for token) or
            "default" (the device's own precision, bf16 on this CPU, f16 on a GPU: faster, and a near-tie may flip).
        draft_precision: the draft's, independent of the target's: the target verifies every draft token, so
            this never changes the output, only how many drafts are accepted. "default" (the device's own, the
            faster: docs/performance.md) or "f32" (acceptance figures that are the same on every machine).
        cache_dir: OpenVINO's model cache folder: later starts import the compiled models instead of compiling.
        threads: CPU inference threads of each compiled model (None: every core); workers that share a CPU each
            take their part (`utils.archive`).
        chat_template_kwargs: extra chat-template arguments; templates with an `enable_thinking` switch are
            rendered in non-thinking mode unless this says otherwise.
    """

    def __init__(self, target: Path | str, draft: ExportedDraft | Path | str | None = None, *,
                 device: str | None = None, precision: str = "default", draft_precision: str = "default",
                 cache_dir: Path | str | None = None, threads: int | None = None, proposer: Proposer | None = None,
                 block_size: int | None = None, chat_template_kwargs: dict | None = None):
        import openvino_genai as ov_genai

        from utils.engine.language_model import LanguageModelSession
        from utils.pipeline.preprocessing import ChatPromptBuilder, ImagePreprocessor
        from utils.pipeline.vision import TextEmbeddings, VisionEncoder

        self.target = ExportedTarget.read(target)  # the folder's files, read once and handed to each part
        self.target_folder = self.target.folder
        self.device = resolve_device(device)
        properties = compile_properties(self.device, precision=precision, cache_dir=cache_dir, threads=threads)
        self.preprocess = ImagePreprocessor.from_processor(self.target.processor)
        self.build_prompt = ChatPromptBuilder.from_processor(self.target.processor,
                                                             template_kwargs=chat_template_kwargs)
        self.tokenizer = ov_genai.Tokenizer(str(self.target_folder))
        self.vision = VisionEncoder(self.target_folder, self.device, properties=properties,
                                    image_processor=self.preprocess.config)
        self.embed = TextEmbeddings(self.target_folder, self.device, properties=properties)
        self.language_model = LanguageModelSession(self.target_folder, config=self.target.language_model,
                                                   device=self.device, properties=properties)
        self._check_context_fits(self.preprocess.config)
        self.precision, self.draft_precision = precision, draft_precision
        self.draft_inference_precision = ""  # what the draft's device runs, once a draft is attached
        self.inference_precision = inference_precision(self.vision.compiled)  # what the device really runs
        self.image_token_id = self.target.image_token_id
        self.eos_token_ids = self.target.stop_token_ids
        self.proposer, self.block_size = proposer, block_size
        if draft is not None:
            if proposer is not None:
                raise ValueError("pass either draft or proposer, not both")
            properties = compile_properties(self.device, precision=draft_precision, cache_dir=cache_dir,
                                            threads=threads)
            self._attach_draft(ExportedDraft.of(draft), properties)
        self.decoder(None)  # checks the block size against the language model now, not at the first page

    def _check_context_fits(self, config) -> None:
        """Refuses, at load, image settings whose largest page would not fit the language model's context."""
        room = self.language_model.max_length - TEXT_AND_ANSWER_RESERVE
        if config.max_image_tokens > room:
            raise ValueError(
                f"{config.source}: max_slice_nums={config.max_slice_nums} lets one "
                f"page take up to {config.max_image_tokens} image tokens, more than the {room} the "
                f"{self.language_model.max_length}-token context leaves beside the text and the answer; supported: "
                f"max_slice_nums <= {room // config.max_tokens_per_tile - 1} (export the target again with "
                f"--max-slice-nums)")

    def _attach_draft(self, draft: ExportedDraft, properties: dict) -> None:
        draft.check_fits(self.target)
        self.proposer = DSparkProposer.load(draft, self.device, properties=properties, embed=self.embed)
        self.block_size = draft.info.block_size
        self.draft_inference_precision = inference_precision(self.proposer.draft.compiled)

    def prompt_embeddings(self, image, prompt: str = DEFAULT_PROMPT, timer: StageTimer | None = None) -> np.ndarray:
        """The prompt's embeddings [T, H] with the page's image features scattered in: what prefill reads.

        Args:
            image: a path, bytes or PIL image.
            prompt: the instruction after the image.
            timer: records the time under "vision" (a fresh one by default).
        """
        return self._prompt(image, prompt, timer or StageTimer())[0]

    def _prompt(self, image, prompt: str, timer: StageTimer) -> tuple[np.ndarray, int, tuple[int, int]]:
        """(`prompt_embeddings`, the page's image tokens, its (width, height) in pixels)."""
        if not prompt or not prompt.strip():
            raise ValueError(f"prompt is empty: say what to read, e.g. {DEFAULT_PROMPT!r}")
        with timer.stage("vision"):
            rgb = load_rgb_image(image, max_pixels=self.preprocess.max_pixels)
            inputs = self.preprocess(rgb)
            text = self.build_prompt([inputs.placeholder], prompt=prompt)
            ids = np.asarray(self.tokenizer.encode(text, add_special_tokens=False).input_ids.data, np.int64)
            embeds = self.embed(ids)[0]
            features = self.vision(inputs.pixel_values, inputs.target_sizes)
            embeds[ids[0] == self.image_token_id] = features
        return embeds, inputs.num_image_tokens, rgb.size

    def _reach(self, image_tokens: int, size: tuple[int, int], max_new_tokens: int) -> tuple[int, str]:
        """(the token budget, a notice): a typewriter reader stops `TYPEWRITER_SLACK` tokens past the page's image
        tokens and says so when the image is not its page; any other target keeps the budget, with no notice."""
        page = self.target.typewriter_page
        if page is None:
            return max_new_tokens, ""
        return min(max_new_tokens, image_tokens + TYPEWRITER_SLACK), "" if size == page.size else page.notice(size)

    def decoder(self, markov_head_top_k: int | None = None, *, markov_head: bool = True) -> SpeculativeDecoder:
        """The decoding engine over this target and draft (cheap: it shares the compiled models).

        Args:
            markov_head_top_k: K of the draft's Top-K scorer; 0 selects the dense walk; None the exported default.
            markov_head: False drafts each block position's own best token (`PER_POSITION_ARGMAX`), as a DFlash
                draft does: DSpark without its Markov walk, to compare the two.
        """
        if not markov_head:
            if markov_head_top_k not in (None, PER_POSITION_ARGMAX):
                raise ValueError(f"markov_head_top_k={markov_head_top_k} chooses a Markov walk, and the Markov head "
                                 "is off: give one or the other")
            markov_head_top_k = PER_POSITION_ARGMAX
        proposer = self.proposer
        if markov_head_top_k is not None:
            if not isinstance(proposer, DSparkProposer):
                raise ValueError(f"markov_head_top_k={markov_head_top_k} needs a DSpark draft; this pipeline has "
                                 f"{'none' if proposer is None else type(proposer).__name__}")
            proposer = proposer.with_top_k(markov_head_top_k)
        return SpeculativeDecoder(self.language_model, self.embed, stop_token_ids=self.eos_token_ids,
                                  proposer=proposer, block_size=self.block_size)

    def generate(self, image, prompt: str = DEFAULT_PROMPT, *, max_new_tokens: int = 512,
                 num_assistant_tokens: int | None = None, markov_head_top_k: int | None = None,
                 markov_head: bool = True, streamer: Callable[[str], object] | None = None,
                 confidence_threshold: float = DEFAULT_CONFIDENCE_THRESHOLD,
                 step_cost: StepCost | None = None) -> OcrResult:
        """Reads the text of one page.

        Args:
            image: a path, bytes or PIL image.
            prompt: the instruction after the image.
            max_new_tokens: token budget (a typewriter reader's is cut at its page's end: `TYPEWRITER_SLACK`).
            num_assistant_tokens: draft tokens verified per step, 1..block size (default: the block size).
            markov_head_top_k: K of the Top-K candidate scorer; 0 selects the dense walk (default: min(64, Vd)).
            markov_head: False drafts without the Markov walk: each block position's own best token (DFlash).
            streamer: called with each new piece of text as it is accepted.
            confidence_threshold: verify only the leading drafts whose predicted acceptance reaches it (0: all).
            step_cost: this device's cost of a step (`utils.engine.step_cost`, measured by `benchmarks.cpu_speedup`):
                verify only as many of those drafts as pay for themselves here. None: the threshold alone.
        """
        decoder = self.decoder(markov_head_top_k, markov_head=markov_head)
        timer = StageTimer()
        front_end_before = self._front_end_openvino_seconds()
        embeds, image_tokens, size = self._prompt(image, prompt, timer)
        max_new_tokens, notice = self._reach(image_tokens, size, max_new_tokens)
        front_end_seconds = self._front_end_openvino_seconds() - front_end_before
        stream = None if streamer is None else TextStreamer(self._detokenize, streamer)
        decoded = decoder.generate(embeds, max_new_tokens=max_new_tokens, num_assistant_tokens=num_assistant_tokens,
                                   confidence_threshold=confidence_threshold, step_cost=step_cost, timer=timer,
                                   on_step=None if stream is None else (lambda step, tokens: stream.put(tokens)))
        if stream:
            stream.put(decoded.tokens, final=True)
        decoded.metrics.openvino_seconds += front_end_seconds
        return OcrResult(texts=[self._detokenize(decoded.tokens)], tokens=decoded.tokens, metrics=decoded.metrics,
                         drafted=decoder.proposer is not None, notice=notice)

    def _detokenize(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def token_text(self, tokens: list[int]) -> str:
        """The text of `tokens` with special tokens written out (`<|im_end|>`), for per-token views."""
        return self.tokenizer.decode(tokens, skip_special_tokens=False)

    def _front_end_openvino_seconds(self) -> float:
        """Seconds inside the vision and text-embedding IRs so far (the decoder counts its own)."""
        return self.vision.clock.seconds + self.embed.clock.seconds
