"""The tiny pair's options: sizes, pretraining and distillation settings, and the name of its build stamp.

Their own module, so the builder (`utils.tiny.pair`) and its stages (`pretrain`, `distill`) all import them
from here and never each other.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from utils.checkpoint.config import check_layer_ids
from utils.pages.samples import SAMPLE_PROMPTS
from utils.pages.reading_pages import MERGING_KINDS, REFINING_KINDS, TRAINING_KINDS
from utils.pages.typewriter import PAGE_CELLS
from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT
from utils.tiny.tokenizer import BYTE_VOCABULARY, PRE_TOKENIZERS

__all__ = ["BUILD_STAMP", "READING_PAIR", "READING_DISTILL", "MERGING_PAIR", "MERGING_READ", "MERGING_DISTILL",
           "MERGE_ALIGNMENTS", "TinyPairConfig", "PretrainConfig", "ReaderConfig", "DistillConfig", "Checkpoints",
           "BUILDER_VERSION"]

BUILD_STAMP = "tiny-pair.json"  # written into every pair folder: the options it was built with
BUILDER_VERSION = 5  # bump when the builder's output changes, so pairs built by older code are rebuilt


def _json_ready(options, *, unrecorded: dict | None = None) -> dict:
    """`options` as JSON-ready values, leaving out each option of `unrecorded` (name -> default) that has its default:
    an option added later is not recorded at its default, so the stamps of pairs built before it stay the same."""
    unrecorded = unrecorded or {}
    return {key: (list(value) if isinstance(value, tuple) else value)
            for key, value in dataclasses.asdict(options).items()
            if key not in unrecorded or getattr(options, key) != unrecorded[key]}


def _check_counts_and_prompts(options, counts: tuple[str, ...]) -> None:
    """Freezes `options.prompts` as a tuple; raises ValueError unless every count is >= 1 and a prompt is given."""
    name = type(options).__name__
    object.__setattr__(options, "prompts", tuple(options.prompts))
    for count in counts:
        if getattr(options, count) < 1:
            raise ValueError(f"{name}: {count}={getattr(options, count)} must be >= 1")
    if not options.prompts:
        raise ValueError(f"{name}: prompts must not be empty")


@dataclass(frozen=True)
class TinyPairConfig:
    """Sizes of the tiny pair. Defaults mirror the real pair's shape at toy scale.

    The real target has 24 text layers (every 4th full attention) and a 248,320-row embedding for a
    248,100-token vocabulary; its draft reads layers [3, 7, 11, 15, 19] and predicts 114,688 tokens (46%).
    """

    seed: int = 0
    tokenizer_vocab_size: int = 1000  # trained BPE size, special tokens included (the draft's input vocabulary);
    # BYTE_VOCABULARY learns no merge: one token per character, as the shipped reader has (READING_PAIR)
    vocab_size: int | None = None  # target embedding rows; default: tokenizer size rounded up to 64
    draft_vocab_size: int = 448
    block_size: int = 8
    target_layer_ids: tuple[int, ...] = (1, 3, 5)
    markov_rank: int = 16
    hidden_size: int = 64
    # The share of each full-attention head's dimensions that RoPE rotates (the real target's: 0.25 of 256). At
    # head_dim 16 a quarter is two frequencies, too few for a position to find one image token 200 back; a reader
    # rotates them all (READING_PAIR).
    partial_rotary_factor: float = 0.25
    rope_theta: float = 10000.0
    num_hidden_layers: int = 8
    full_attention_interval: int = 4
    draft_num_layers: int = 2
    initializer_range: float = 0.1
    eos_scale: float = 2.0
    patch_size: int = 14
    scale_resolution: int = 112
    max_slice_nums: int = 4
    small_image_upsize: str = "always"  # the processor's handling of pages within scale_resolution² (READING_PAIR)
    mask_token: str = field(default="<|mask|>")
    pre_tokenizer: str = "gpt2"  # how the BPE splits text before merging (`utils.tiny.tokenizer.PRE_TOKENIZERS`)

    def __post_init__(self):
        object.__setattr__(self, "target_layer_ids", tuple(int(i) for i in self.target_layer_ids))
        if self.vocab_size is None:
            object.__setattr__(self, "vocab_size", -(-self.tokenizer_vocab_size // 64) * 64)
        self.validate()

    def validate(self) -> None:
        """Raises ValueError naming the option that cannot make a valid pair."""
        def fail(message):
            raise ValueError(f"TinyPairConfig: {message}")

        if self.tokenizer_vocab_size < BYTE_VOCABULARY:
            fail(f"tokenizer_vocab_size={self.tokenizer_vocab_size} must be >= {BYTE_VOCABULARY} "
                 f"(256 bytes + {BYTE_VOCABULARY - 256} special tokens)")
        if self.pre_tokenizer not in PRE_TOKENIZERS:
            fail(f"pre_tokenizer={self.pre_tokenizer!r} must be one of {', '.join(PRE_TOKENIZERS)}")
        if self.small_image_upsize not in ("always", "never", "adaptive"):
            fail(f"small_image_upsize={self.small_image_upsize!r} must be 'always', 'never' or 'adaptive'")
        if self.vocab_size < self.tokenizer_vocab_size:
            fail(f"vocab_size={self.vocab_size} must be >= tokenizer_vocab_size={self.tokenizer_vocab_size}")
        if not 1 <= self.draft_vocab_size < self.tokenizer_vocab_size:
            fail(f"draft_vocab_size={self.draft_vocab_size} must be in [1, {self.tokenizer_vocab_size - 1}]: "
                 f"a pruned draft predicts part of the target vocabulary (tokenizer_vocab_size)")
        if self.block_size < 2:
            fail(f"block_size={self.block_size} must be >= 2 (the anchor and at least one mask position)")
        check_layer_ids(self.target_layer_ids, field="target_layer_ids", num_layers=self.num_hidden_layers - 1,
                        source="TinyPairConfig",
                        note="the last layer's output is normed in HF hidden_states, so it is not offered")
        if self.markov_rank < 1:
            fail(f"markov_rank={self.markov_rank} must be >= 1")
        if self.hidden_size % 4 or self.hidden_size < 16:
            fail(f"hidden_size={self.hidden_size} must be a multiple of 4 and >= 16 (4 attention heads)")
        if not 0 < self.partial_rotary_factor <= 1 or (self.hidden_size // 4 * self.partial_rotary_factor) % 2:
            fail(f"partial_rotary_factor={self.partial_rotary_factor} must be in (0, 1] and rotate an even number "
                 f"of the {self.hidden_size // 4} dimensions of a head")
        if self.rope_theta <= 1:
            fail(f"rope_theta={self.rope_theta} must be > 1")
        if self.draft_num_layers < 1:
            fail(f"draft_num_layers={self.draft_num_layers} must be >= 1")
        if not 1 <= self.full_attention_interval <= self.num_hidden_layers:
            fail(f"full_attention_interval={self.full_attention_interval} must be in [1, {self.num_hidden_layers}]")

    def options(self) -> dict:
        """Every option, JSON-ready; GPT-2's pre-tokenizer is not recorded, as pairs built before the option did not."""
        return _json_ready(self, unrecorded={"pre_tokenizer": "gpt2"})

    def to_json(self) -> dict:
        """The build stamp: the options and the builder version."""
        return self.options() | {"builder_version": BUILDER_VERSION}


# The sizes of a pair whose target learns to read (`ReaderConfig`, `python -m utils.tiny --read`): one token per
# character, glyphs the model sees at their own size (a typewriter page of up to MAX_PAGE_CELLS cells fits in
# 560² pixels, one 28-pixel cell per image token; every page has PAGE_CELLS), a draft vocabulary that holds what
# a reader writes, and a smaller initialisation, with which training from random weights starts faster.
READING_PAIR = {"tokenizer_vocab_size": BYTE_VOCABULARY, "draft_vocab_size": 96, "initializer_range": 0.02,
                "scale_resolution": 560, "small_image_upsize": "never", "partial_rotary_factor": 1.0}
# How a reading pair's draft distils (`DistillConfig`): on the pages its target reads, to their end, told where on
# the page the characters it predicts are (`alignment_weight`), on 32 anchors of each answer per step, asked with
# the default prompt only: the draft learns the one offset from its block to the glyphs it predicts, which the
# page's shape and the prompt's length fix (`utils.pages.typewriter.PAGE_ROWS`).
READING_DISTILL = {"page_style": "typewriter", "prompts": (DEFAULT_PROMPT,), "max_new_tokens": PAGE_CELLS,
                   "pages": 64, "steps": 1500, "anchors_per_sequence": 32, "alignment_weight": 1.0,
                   "calibration_pages": 64, "unmoved_share": 0.5}


# A pair in the real pair's regime (`python -m utils.tiny --read --merges`): the reading pair's sizes with a byte-level
# BPE of 512 tokens merging inside words only (1.2 characters a token on `MERGING_KINDS`' pages), a draft of half of
# them (the tokens its training answers use most: 4 x 64, so that a Top-64 walk is an approximation) and 15 drafts a
# block, as the real pair; the reader learns the merges and unpadded rows after reading one token per character
# (`merge_steps`), and the draft distils on the pages it learnt them on (`MERGING_KINDS`). With 768 tokens the reader
# learnt slower; with GPT-2's pre-tokenizer it lost its place in runs of spaces merged into one token
# (docs/tiny-pair.md).
MERGING_PAIR = {"tokenizer_vocab_size": 512, "draft_vocab_size": 256, "block_size": 15, "pre_tokenizer": "letters"}
MERGING_READ = {"merge_steps": 12000}  # about 100 minutes on one core
MERGING_DISTILL = {"page_kinds": MERGING_KINDS}
MERGE_ALIGNMENTS = ("slots", "cells")  # `ReaderConfig.merge_alignment`


@dataclass(frozen=True)
class Checkpoints:
    """Where and how often `train_steps` saves what it needs to resume, and the options that training was run with.

    A training of 3 hours outlives a working session: it saves every `every` steps (and after its last), and a run
    with the same `options` resumes where the last checkpoint left off; a checkpoint of other options is refused.
    """

    folder: Path
    options: dict  # JSON-ready: everything that decides the weights (a resumed run must have been started so)
    every: int = 100  # steps between checkpoints: about 90 s of the reader's training

    def __post_init__(self):
        object.__setattr__(self, "folder", Path(self.folder))
        if self.every < 1:
            raise ValueError(f"Checkpoints: every={self.every} must be >= 1")

    def stamped(self, key: str, options: dict) -> Checkpoints:
        """These checkpoints with `options` under `key` in their options: a training stamps its own, so that no
        caller can resume it with another recipe."""
        return dataclasses.replace(self, options=self.options | {key: options})

    def path(self, name: str) -> Path:
        """The checkpoint file of the training called `name` (one file per phase)."""
        return self.folder / f"{name}.checkpoint.pt"


@dataclass(frozen=True)
class PretrainConfig:
    """How `utils.tiny.pretrain` trains the tiny target to write corpus text: answers that a draft can learn.

    Each step trains on `examples_per_step` generated pages (corpus passages no held-out sample page shows),
    each asked with one of `prompts`, the passage and EOS as the answer.
    """

    steps: int = 50  # much more memorises the few training lines: one answer for every page, nothing rejected
    examples_per_step: int = 4
    prompts: tuple[str, ...] = SAMPLE_PROMPTS
    max_lines: int = 4  # passage length in corpus lines, drawn in [1, max_lines]
    learning_rate: float = 3e-3
    seed: int = 0

    def __post_init__(self):
        _check_counts_and_prompts(self, ("steps", "examples_per_step", "max_lines"))
        if self.learning_rate <= 0:
            raise ValueError(f"PretrainConfig: learning_rate={self.learning_rate} must be > 0")

    def options(self) -> dict:
        """Every option, JSON-ready (recorded in the pair's build stamp)."""
        return _json_ready(self)


@dataclass(frozen=True)
class ReaderConfig:
    """How `utils.tiny.reader` trains the tiny target to read generated pages (`utils.pages.reading_pages`).

    The defaults take about 45 minutes on two CPU cores (a few minutes more go to measuring the learning curve).
    """

    steps: int = 3000
    examples_per_step: int = 4
    prompts: tuple[str, ...] = SAMPLE_PROMPTS
    learning_rate: float = 2e-3
    warmup_steps: int = 50  # linear warm-up to learning_rate (a training shorter than this never reaches it)
    glyph_weight: float = 1.0  # the glyph head's loss: names the character of every image token (training only)
    alignment_weight: float = 1.0  # the attention alignment's loss: character k looks at image token k
    # Training only: every linear layer's input is multiplied by (1 + N(0, precision_noise^2)), so that the
    # answers' margins clear the rounding of a lower precision (bf16 rounds at 2^-9, about 0.002).
    precision_noise: float = 0.01
    # The page kinds trained on, in turn: documents and as many pages of text no language prior predicts, so that
    # the reader finds its place by the page, not by what it expects to write (`utils.pages.reading_pages`).
    kinds: tuple[str, ...] = TRAINING_KINDS
    sparse_share: float = 0.25  # pages with fewer, blank or short rows: any text that fits the grid
    checkpoints: int = 6  # held-out CER measured this many times during training: the learning curve
    held_out_pages: int = 14
    seed: int = 0
    # Then the reader may refine on pages where it still fails (look-alike glyphs, rows that repeat), every other
    # page one of those (`REFINING_KINDS`), with a fresh optimiser, its own page stream, a lower peak learning rate
    # and `refine_unmoved_share` of its pages with no glyph moved in its cell (`Ink.random`), as users' pages have
    # them. 0 steps: the first phase alone, as pairs shipped before issue 48 were (docs/tiny-pair.md compares them).
    refine_steps: int = 1500
    refine_kinds: tuple[str, ...] = REFINING_KINDS
    refine_learning_rate: float = 1e-3
    refine_unmoved_share: float = 0.5
    # Then, for a pair whose tokenizer has merges, the reader is grown to that vocabulary and learns to write merged
    # tokens of rows without their trailing spaces (`utils.tiny.reader.train_merges`), on `merge_kinds` (layout rows
    # between the refining's kinds). 0 steps: a reader of one token per character and padded rows, as shipped before.
    merge_steps: int = 0
    merge_kinds: tuple[str, ...] = MERGING_KINDS
    merge_learning_rate: float = 1e-3
    # How the alignment tells a merge's writer where to look (`MERGE_ALIGNMENTS`): "slots", head h of each
    # full-attention layer at the token's character h, then at the characters after it; "cells", every head at all of
    # the token's cells, as before slots (docs/tiny-pair.md compares them).
    merge_alignment: str = "slots"

    def __post_init__(self):
        _check_counts_and_prompts(self, ("steps", "examples_per_step", "checkpoints", "held_out_pages"))
        object.__setattr__(self, "kinds", tuple(self.kinds))
        object.__setattr__(self, "refine_kinds", tuple(self.refine_kinds))
        object.__setattr__(self, "merge_kinds", tuple(self.merge_kinds))
        if not self.kinds or not self.refine_kinds or not self.merge_kinds:
            raise ValueError("ReaderConfig: kinds, refine_kinds and merge_kinds must not be empty")
        if self.merge_steps < 0:
            raise ValueError(f"ReaderConfig: merge_steps={self.merge_steps} must be >= 0")
        if self.merge_alignment not in MERGE_ALIGNMENTS:
            raise ValueError(f"ReaderConfig: merge_alignment={self.merge_alignment!r}: choose one of "
                             f"{', '.join(MERGE_ALIGNMENTS)}")
        if self.merge_learning_rate <= 0:
            raise ValueError(f"ReaderConfig: merge_learning_rate={self.merge_learning_rate} must be > 0")
        if self.refine_steps < 0:
            raise ValueError(f"ReaderConfig: refine_steps={self.refine_steps} must be >= 0")
        if self.refine_learning_rate <= 0:
            raise ValueError(f"ReaderConfig: refine_learning_rate={self.refine_learning_rate} must be > 0")
        if not 0 <= self.refine_unmoved_share <= 1:
            raise ValueError(f"ReaderConfig: refine_unmoved_share={self.refine_unmoved_share} must be in [0, 1]")
        if not 0 <= self.sparse_share <= 1:
            raise ValueError(f"ReaderConfig: sparse_share={self.sparse_share} must be in [0, 1]")
        if self.learning_rate <= 0:
            raise ValueError(f"ReaderConfig: learning_rate={self.learning_rate} must be > 0")
        if self.warmup_steps < 0:
            raise ValueError(f"ReaderConfig: warmup_steps={self.warmup_steps} must be >= 0")
        for name in ("glyph_weight", "alignment_weight", "precision_noise"):
            if getattr(self, name) < 0:
                raise ValueError(f"ReaderConfig: {name}={getattr(self, name)} must be >= 0")

    def options(self) -> dict:
        """Every option, JSON-ready (recorded in the pair's build stamp); a reader that is not refined records the
        first phase's alone, as readers did before refining existed, and one that writes no merges no merge option."""
        options = self.character_reader_options()
        return options | self._phase_options("merge_") if self.merge_steps else options

    def character_reader_options(self) -> dict:
        """The options of the one-token-per-character reader the merges start from (`train_merges`): what a reader
        built without merges records."""
        return self.first_phase_options() | (self._phase_options("refine_") if self.refine_steps else {})

    def first_phase_options(self) -> dict:
        """The options of the first phase alone: what a reader built without refining records
        (`utils.tiny.reader.train_reader` may start from such a reader instead of training it again)."""
        return {key: value for key, value in _json_ready(self).items() if not key.startswith(("refine_", "merge_"))}

    def _phase_options(self, prefix: str) -> dict:
        return {key: value for key, value in _json_ready(self).items() if key.startswith(prefix)}


PAGE_STYLES = ("corpus", "typewriter")  # the pages a draft distils on (`utils.tiny.distill_data.training_pages`)


@dataclass(frozen=True)
class DistillConfig:
    """How `utils.tiny.distill` trains the tiny draft on the tiny target's greedy answers (see that module).

    The defaults take about two minutes on two CPU cores.
    """

    pages: int = 32  # generated training pages; each is answered for every prompt
    page_style: str = "corpus"  # "corpus" passages in PIL's font, or "typewriter" pages, which a reader reads
    prompts: tuple[str, ...] = SAMPLE_PROMPTS
    max_new_tokens: int = 64  # answer budget per (page, prompt)
    steps: int = 100
    sequences_per_step: int = 8
    learning_rate: float = 3e-3
    loss_decay_gamma: float = 4.0
    confidence_alpha: float = 1.0
    anchors_per_sequence: int = 0  # anchors trained on per answer, drawn at random each step; 0: every position
    alignment_weight: float = 0.0  # typewriter pages: block position j attends the image token of its label
    calibration_pages: int = 0  # fresh pages (seed + 1) the confidence head is refitted on; 0: keep the trained head
    unmoved_share: float = 0.0  # typewriter pages with no glyph moved in its cell, as users' pages (`Ink.random`)
    page_kinds: tuple[str, ...] = TRAINING_KINDS  # the kinds of the typewriter pages (`utils.pages.reading_pages`)
    seed: int = 0

    def __post_init__(self):
        _check_counts_and_prompts(self, ("pages", "steps", "sequences_per_step"))
        object.__setattr__(self, "page_kinds", tuple(self.page_kinds))
        if not self.page_kinds:
            raise ValueError("DistillConfig: page_kinds must not be empty")
        if self.anchors_per_sequence < 0:
            raise ValueError(f"DistillConfig: anchors_per_sequence={self.anchors_per_sequence} must be >= 0")
        if self.calibration_pages < 0:
            raise ValueError(f"DistillConfig: calibration_pages={self.calibration_pages} must be >= 0")
        if self.alignment_weight < 0:
            raise ValueError(f"DistillConfig: alignment_weight={self.alignment_weight} must be >= 0")
        if not 0 <= self.unmoved_share <= 1:
            raise ValueError(f"DistillConfig: unmoved_share={self.unmoved_share} must be in [0, 1]")
        if self.alignment_weight and self.page_style != "typewriter":
            raise ValueError("DistillConfig: alignment_weight needs page_style='typewriter' (answer token k is "
                             "image token k only there)")
        if self.max_new_tokens < 2:
            raise ValueError(f"DistillConfig: max_new_tokens={self.max_new_tokens} must be >= 2 "
                             f"(an anchor and a label)")
        for name in ("learning_rate", "loss_decay_gamma"):
            if getattr(self, name) <= 0:
                raise ValueError(f"DistillConfig: {name}={getattr(self, name)} must be > 0")
        if self.confidence_alpha < 0:
            raise ValueError(f"DistillConfig: confidence_alpha={self.confidence_alpha} must be >= 0")
        if self.page_style not in PAGE_STYLES:
            raise ValueError(f"DistillConfig: page_style={self.page_style!r} must be one of {', '.join(PAGE_STYLES)}")

    def options(self) -> dict:
        """Every option, JSON-ready (recorded in the pair's build stamp); a draft distilled with every glyph moved
        records no `unmoved_share`, and one distilled on `TRAINING_KINDS` no `page_kinds`, as drafts did before the
        options existed."""
        return _json_ready(self, unrecorded={"unmoved_share": 0.0, "page_kinds": TRAINING_KINDS})

