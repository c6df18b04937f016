"""Speculative OCR on OpenVINO Runtime: MiniCPM-OCR verified against its DSpark draft, without torch.

One `generate` call:

    image -> preprocessing (numpy/PIL) -> vision IR -> features scattered into the prompt embeddings
          -> language model prefill -> first token
    loop: draft block [anchor, mask, ...] -> Markov head (Top-K scorer or dense walk) -> drafts
          -> language model verify [anchor, drafts] -> host argmax -> accept the longest matching prefix
          -> rollback the target state to it -> emit the accepted tokens and the bonus token

Without a draft the loop is plain greedy decoding with the decode IR (the baseline). Either way the output
is the target's own greedy output, token for token (`utils.verification`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from utils.runtime.device import compile_properties, inference_precision, resolve_device
from utils.runtime.metrics import GenerationMetrics, OcrResult, StageTimer
from utils.verification import StepRecord, accepted_prefix_length, emitted_tokens

__all__ = ["DEFAULT_PROMPT", "STOP_TOKENS", "Proposer", "DSparkProposer", "SpeculativeOcrPipeline", "TextStreamer"]

DEFAULT_PROMPT = "Text Recognition:"
TEXT_AND_ANSWER_RESERVE = 1024  # context tokens kept for the prompt's text and the answer beside the image
STOP_TOKENS = ("<|im_end|>",)  # the end of a chat turn stops an answer whatever eos_token_id says


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


class Proposer(Protocol):
    """What proposes draft tokens each step: the DSpark draft, or a stand-in in tests and benchmarks."""

    def reset(self) -> None: ...

    def propose(self, anchor: int, new_context: np.ndarray, *, num_tokens: int, top_k: int | None,
                timer: StageTimer, generated: list[int]) -> tuple[list[int], np.ndarray | None]: ...


class DSparkProposer:
    """The exported DSpark draft: block forward, then the Markov head's walk (target ids and confidences)."""

    def __init__(self, folder: Path, device: str, *, properties: dict, embed):
        from utils.runtime.draft import DraftModel, MarkovHead

        self.draft = DraftModel(folder, device, properties=properties)
        self.markov_head = MarkovHead(folder, device, properties=properties)
        self.info = self.draft.info
        self.embed = embed
        self.clocks = (self.draft.clock, self.markov_head.clock)

    def reset(self) -> None:
        self.draft.crop(0)

    def propose(self, anchor: int, new_context: np.ndarray, *, num_tokens: int, top_k: int | None,
                timer: StageTimer, generated: list[int]) -> tuple[list[int], np.ndarray | None]:
        """Draft tokens (target ids) after `anchor`, given the target hidden states not yet seen [N, L*H]."""
        with timer.stage("draft"):
            block = np.array([[anchor] + [self.info.mask_token_id] * (self.info.block_size - 1)], np.int64)
            logits, hidden = self.draft.forward_block(self.embed(block), new_context[None])
        with timer.stage("markov_head"):
            drafts, confidences = self.markov_head.walk(logits, hidden, anchor=anchor, num_tokens=num_tokens,
                                                        top_k=top_k)
        return drafts.tolist(), confidences


class SpeculativeOcrPipeline:
    """OCR with a MiniCPM-OCR IR folder and, optionally, a DSpark draft IR folder.

    Args:
        target: folder written by `utils.export.export_target`.
        draft: folder written by `utils.export.export_draft`, or None for target-only decoding.
        proposer: a stand-in for the draft (tests, engine benchmarks); excludes `draft`.
        block_size: the largest `num_assistant_tokens` a `proposer` serves (a draft brings its own).
        device: `CPU`, `GPU`, `AUTO` or None (GPU when an Intel GPU is present).
        precision: "f32" (exact: the output equals target-only decoding token for token) or "default" (the
            device's own precision, bf16 on this CPU, f16 on a GPU: faster, and a near-tie may flip).
        cache_dir: compiled-kernel cache for GPU/AUTO.
        chat_template_kwargs: extra chat-template arguments; templates with an `enable_thinking` switch are
            rendered in non-thinking mode unless this says otherwise.
    """

    def __init__(self, target: Path | str, draft: Path | str | None = None, *, device: str | None = None,
                 precision: str = "default", cache_dir: Path | str | None = None, proposer: Proposer | None = None,
                 block_size: int | None = None, chat_template_kwargs: dict | None = None):
        import openvino_genai as ov_genai

        from utils.preprocessing import ChatPromptBuilder, ImagePreprocessor
        from utils.runtime.language_model import LanguageModelSession
        from utils.runtime.vision import TextEmbeddings, VisionEncoder

        self.target_folder = Path(target)
        self.device = resolve_device(device)
        properties = compile_properties(self.device, precision=precision, cache_dir=cache_dir)
        self.preprocess = ImagePreprocessor.from_pretrained(self.target_folder)
        self.build_prompt = ChatPromptBuilder.from_pretrained(self.target_folder, template_kwargs=chat_template_kwargs)
        self.tokenizer = ov_genai.Tokenizer(str(self.target_folder))
        self.vision = VisionEncoder(self.target_folder, self.device, properties=properties)
        self.embed = TextEmbeddings(self.target_folder, self.device, properties=properties)
        self.language_model = LanguageModelSession(self.target_folder, device=self.device, properties=properties)
        self._check_context_fits(self.preprocess.config)
        self.precision = precision
        self.inference_precision = inference_precision(self.vision.compiled)  # what the device really runs
        config = json.loads((self.target_folder / "config.json").read_text())
        self.image_token_id = int(config["image_token_id"])
        self.eos_token_ids = _eos_token_ids(self.target_folder)
        self.proposer, self.block_size = proposer, block_size
        if draft is not None:
            if proposer is not None:
                raise ValueError("pass either draft or proposer, not both")
            self._attach_draft(Path(draft), properties)
        if self.proposer is not None and not 1 <= (self.block_size or 0) < self.language_model.verify_length:
            raise ValueError(f"block_size={self.block_size} must be in [1, {self.language_model.verify_length - 1}] "
                             f"(the target IR verifies {self.language_model.verify_length} tokens)")

    def _check_context_fits(self, config) -> None:
        """Refuses, at load, image settings whose largest page would not fit the language model's context."""
        room = self.language_model.max_length - TEXT_AND_ANSWER_RESERVE
        if config.max_image_tokens > room:
            raise ValueError(
                f"{self.target_folder}: the image processor's max_slice_nums={config.max_slice_nums} lets one "
                f"page take up to {config.max_image_tokens} image tokens, more than the {room} the "
                f"{self.language_model.max_length}-token context leaves beside the text and the answer; supported: "
                f"max_slice_nums <= {room // config.max_tokens_per_tile - 1}")

    def _attach_draft(self, folder: Path, properties: dict) -> None:
        from utils.draft.checkpoint import TargetSpec, check_config_fits_target
        from utils.draft.config import DSparkConfig

        config_path = folder / "config.json"
        check_config_fits_target(DSparkConfig.from_folder(folder), TargetSpec.from_folder(self.target_folder),
                                 source=str(config_path))
        self.proposer = DSparkProposer(folder, self.device, properties=properties, embed=self.embed)
        info = self.proposer.info
        if list(info.target_layer_ids) != self.language_model.hidden_layer_ids:
            raise ValueError(f"{config_path}: the draft reads target layers {list(info.target_layer_ids)}, but "
                             f"{self.target_folder} was exported for layers {self.language_model.hidden_layer_ids}")
        self.block_size = info.block_size

    def prompt_embeddings(self, image, prompt: str = DEFAULT_PROMPT, timer: StageTimer | None = None) -> np.ndarray:
        """The prompt's embeddings [T, H] with the page's image features scattered in: what prefill reads.

        Args:
            image: a path, bytes or PIL image.
            prompt: the instruction after the image.
            timer: records the time under "vision" (a fresh one by default).
        """
        timer = timer or StageTimer()
        if not prompt or not prompt.strip():
            raise ValueError("prompt is empty: say what to read, e.g. 'Text Recognition:'")
        with timer.stage("vision"):
            inputs = self.preprocess(image)
            text = self.build_prompt([inputs.placeholder], prompt=prompt)
            ids = np.asarray(self.tokenizer.encode(text, add_special_tokens=False).input_ids.data, np.int64)
            embeds = self.embed(ids)[0]
            features = self.vision(inputs.pixel_values, inputs.target_sizes)
            embeds[ids[0] == self.image_token_id] = features
        return embeds

    def generate(self, image, prompt: str = DEFAULT_PROMPT, *, max_new_tokens: int = 512,
                 num_assistant_tokens: int | None = None, markov_head_top_k: int | None = None,
                 streamer: Callable[[str], object] | None = None, confidence_threshold: float = 0.0) -> OcrResult:
        """Reads the text of one page.

        Args:
            image: a path, bytes or PIL image.
            prompt: the instruction after the image.
            max_new_tokens: token budget.
            num_assistant_tokens: draft tokens verified per step, 1..block size (default: the block size).
            markov_head_top_k: K of the Top-K candidate scorer; 0 selects the dense walk (default: min(64, Vd)).
            streamer: called with each new piece of text as it is accepted.
            confidence_threshold: verify only the leading drafts whose predicted acceptance reaches it.
        """
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 1")
        num_assistant_tokens = self._check_assistant_tokens(num_assistant_tokens)
        timer = StageTimer()
        openvino_before = self._openvino_seconds()
        self.language_model.reset()
        if self.proposer is not None:
            self.proposer.reset()
        embeds = self.prompt_embeddings(image, prompt, timer)
        with timer.stage("prefill"):
            logits, new_context = self.language_model.prefill(embeds)
        tokens = [int(np.argmax(logits))]
        ttft = timer.elapsed()
        steps = [StepRecord(drafted=(), emitted=(tokens[0],))]
        stream = None if streamer is None else TextStreamer(self._detokenize, streamer)
        if stream:
            stream.put(tokens)
        while tokens[-1] not in self.eos_token_ids and len(tokens) < max_new_tokens:
            budget = max_new_tokens - len(tokens)
            if self.proposer is None:
                step, new_context = self._decode_step(tokens[-1], timer)
            else:
                step, new_context = self._speculative_step(tokens, new_context, timer, budget=budget,
                                                           num_tokens=num_assistant_tokens, top_k=markov_head_top_k,
                                                           threshold=confidence_threshold)
            steps.append(step)
            tokens.extend(step.emitted)
            if stream:
                stream.put(tokens)
        if stream:
            stream.put(tokens, final=True)
        total = timer.elapsed()
        metrics = GenerationMetrics(ttft=ttft, total=total, num_generated_tokens=len(tokens), steps=steps,
                                    stage_seconds=dict(timer.seconds),
                                    openvino_seconds=self._openvino_seconds() - openvino_before)
        return OcrResult(texts=[self._detokenize(tokens)], tokens=tokens, metrics=metrics,
                         drafted=self.proposer is not None)

    def _check_assistant_tokens(self, num_assistant_tokens: int | None) -> int | None:
        if self.proposer is None:
            return None
        block = self.block_size
        count = block if num_assistant_tokens is None else num_assistant_tokens
        if not 1 <= count <= block:
            raise ValueError(f"num_assistant_tokens={count} must be in [1, {block}] (the draft's block size)")
        return count

    def _decode_step(self, token: int, timer: StageTimer) -> tuple[StepRecord, np.ndarray]:
        with timer.stage("verification"):
            logits, hidden = self.language_model.decode_one(self.embed(np.array([[token]], np.int64))[0, 0])
        return StepRecord(drafted=(), emitted=(int(np.argmax(logits)),)), hidden[None]

    def _speculative_step(self, tokens: list[int], new_context: np.ndarray, timer: StageTimer, *, budget: int,
                          num_tokens: int, top_k: int | None, threshold: float) -> tuple[StepRecord, np.ndarray]:
        anchor = tokens[-1]
        drafts, confidences = self.proposer.propose(anchor, new_context, num_tokens=num_tokens, top_k=top_k,
                                                    timer=timer, generated=tokens)
        if threshold > 0 and confidences is not None:
            doubtful = np.flatnonzero(confidences < threshold)
            drafts = drafts[:int(doubtful[0]) if doubtful.size else len(drafts)]
        with timer.stage("verification"):
            block_ids = np.array([[anchor] + drafts], np.int64)
            verify_logits, verify_hidden = self.language_model.verify(self.embed(block_ids)[0])
            target_argmax = verify_logits[:len(drafts) + 1].argmax(-1).tolist()
            accepted = accepted_prefix_length(drafts, target_argmax)
            self.language_model.accept(accepted + 1)
        emitted = emitted_tokens(target_argmax, accepted, eos_token_ids=self.eos_token_ids, budget=budget)
        kept_confidences = None if confidences is None else tuple(float(c) for c in confidences[:len(drafts)])
        step = StepRecord(drafted=tuple(drafts), emitted=tuple(emitted), confidences=kept_confidences)
        return step, verify_hidden[:accepted + 1]

    def _detokenize(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def token_text(self, tokens: list[int]) -> str:
        """The text of `tokens` with special tokens written out (`<|im_end|>`), for per-token views."""
        return self.tokenizer.decode(tokens, skip_special_tokens=False)

    def _openvino_seconds(self) -> float:
        """Seconds inside OpenVINO inference calls so far, over every model of the pipeline."""
        clocks = [self.vision.clock, self.embed.clock, *getattr(self.proposer, "clocks", ())]
        return self.language_model.timings.openvino_seconds + sum(clock.seconds for clock in clocks)


def _eos_token_ids(folder: Path) -> tuple[int, ...]:
    """The stop set: every `eos_token_id` of generation_config.json and config.json (top level, where
    MiniCPM-V 4.6 keeps it, and text_config), and the ids of the chat's end-of-turn tokens (`STOP_TOKENS`)."""
    sources = [(folder / "generation_config.json", ()), (folder / "config.json", ()),
               (folder / "config.json", ("text_config",))]
    ids = set()
    for path, keys in sources:
        config = json.loads(path.read_text()) if path.is_file() else {}
        for key in keys:
            config = config.get(key, {})
        eos = config.get("eos_token_id")
        ids.update(eos if isinstance(eos, list) else [] if eos is None else [eos])
    tokenizer = folder / "tokenizer.json"
    if tokenizer.is_file():
        added = json.loads(tokenizer.read_text()).get("added_tokens", [])
        ids.update(token["id"] for token in added if token.get("content") in STOP_TOKENS)
    if not ids:
        raise ValueError(f"{folder}: no eos_token_id in generation_config.json or config.json, and no "
                         f"{list(STOP_TOKENS)} in tokenizer.json: the answer would never stop")
    return tuple(sorted(int(token) for token in ids))
