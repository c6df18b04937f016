"""Options and the one entry point that builds the tiny target + draft pair."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from utils.files import atomic_directory

__all__ = ["TinyPairConfig", "PretrainConfig", "DistillConfig", "TinyPair", "build_tiny_pair", "build_stamp", "default_pair",
           "BUILD_STAMP", "SHIPPED_PAIR_DIR"]

BUILD_STAMP = "tiny-pair.json"
BUILDER_VERSION = 2  # bump when the builder's output changes, so pairs built by older code are rebuilt
SHIPPED_PAIR_DIR = Path(__file__).resolve().parent / "default"  # the default pair, shipped in the repository


def _json_ready(options) -> dict:
    return {key: (list(value) if isinstance(value, tuple) else value)
            for key, value in dataclasses.asdict(options).items()}


@dataclass(frozen=True)
class TinyPairConfig:
    """Sizes of the tiny pair. Defaults mirror the real pair's shape at toy scale.

    The real target has 24 text layers (every 4th full attention) and a 248,320-row embedding for a
    248,100-token vocabulary; its draft reads layers [3, 7, 11, 15, 19] and predicts 114,688 tokens (46%).
    """

    seed: int = 0
    tokenizer_vocab_size: int = 1000  # trained BPE size, special tokens included (the draft's input vocabulary)
    vocab_size: int | None = None  # target embedding rows; default: tokenizer size rounded up to 64
    draft_vocab_size: int = 448
    block_size: int = 8
    target_layer_ids: tuple[int, ...] = (1, 3, 5)
    markov_rank: int = 16
    hidden_size: int = 64
    num_hidden_layers: int = 8
    full_attention_interval: int = 4
    draft_num_layers: int = 2
    initializer_range: float = 0.1
    eos_scale: float = 2.0
    patch_size: int = 14
    scale_resolution: int = 112
    max_slice_nums: int = 4
    mask_token: str = field(default="<|mask|>")

    def __post_init__(self):
        object.__setattr__(self, "target_layer_ids", tuple(int(i) for i in self.target_layer_ids))
        if self.vocab_size is None:
            object.__setattr__(self, "vocab_size", -(-self.tokenizer_vocab_size // 64) * 64)
        self.validate()

    def validate(self) -> None:
        """Raises ValueError naming the option that cannot make a valid pair."""
        def fail(message):
            raise ValueError(f"TinyPairConfig: {message}")

        if self.tokenizer_vocab_size < 300:
            fail(f"tokenizer_vocab_size={self.tokenizer_vocab_size} must be >= 300 (256 bytes + special tokens)")
        if self.vocab_size < self.tokenizer_vocab_size:
            fail(f"vocab_size={self.vocab_size} must be >= tokenizer_vocab_size={self.tokenizer_vocab_size}")
        if not 1 <= self.draft_vocab_size < self.tokenizer_vocab_size:
            fail(f"draft_vocab_size={self.draft_vocab_size} must be in [1, {self.tokenizer_vocab_size - 1}]: "
                 f"a pruned draft predicts part of the target vocabulary (tokenizer_vocab_size)")
        if self.block_size < 2:
            fail(f"block_size={self.block_size} must be >= 2 (the anchor and at least one mask position)")
        if not self.target_layer_ids:
            fail("target_layer_ids must not be empty")
        if len(set(self.target_layer_ids)) != len(self.target_layer_ids):
            fail(f"target_layer_ids={list(self.target_layer_ids)} repeats a layer")
        for layer_id in self.target_layer_ids:
            if not 0 <= layer_id < self.num_hidden_layers - 1:
                fail(f"target layer id {layer_id} is out of range [0, {self.num_hidden_layers - 2}] "
                     f"(the last layer's output is normed in HF hidden_states, so it is not offered)")
        if self.markov_rank < 1:
            fail(f"markov_rank={self.markov_rank} must be >= 1")
        if self.hidden_size % 4 or self.hidden_size < 16:
            fail(f"hidden_size={self.hidden_size} must be a multiple of 4 and >= 16 (4 attention heads)")
        if self.draft_num_layers < 1:
            fail(f"draft_num_layers={self.draft_num_layers} must be >= 1")
        if not 1 <= self.full_attention_interval <= self.num_hidden_layers:
            fail(f"full_attention_interval={self.full_attention_interval} must be in [1, {self.num_hidden_layers}]")

    def options(self) -> dict:
        """Every option, JSON-ready."""
        return _json_ready(self)

    def to_json(self) -> dict:
        """The build stamp: the options and the builder version."""
        return self.options() | {"builder_version": BUILDER_VERSION}


@dataclass(frozen=True)
class PretrainConfig:
    """How `utils.tiny.pretrain` trains the tiny target to write corpus text: answers that a draft can learn.

    Each step trains on `examples_per_step` generated pages (corpus passages no held-out sample page shows),
    each asked with one of `prompts`, the passage and EOS as the answer.
    """

    steps: int = 50  # much more memorises the few training lines: one answer for every page, nothing rejected
    examples_per_step: int = 4
    prompts: tuple[str, ...] = ("Text Recognition:", "Read all the text in the image.")
    max_lines: int = 4  # passage length in corpus lines, drawn in [1, max_lines]
    learning_rate: float = 3e-3
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "prompts", tuple(self.prompts))
        for name in ("steps", "examples_per_step", "max_lines"):
            if getattr(self, name) < 1:
                raise ValueError(f"PretrainConfig: {name}={getattr(self, name)} must be >= 1")
        if not self.prompts:
            raise ValueError("PretrainConfig: prompts must not be empty")
        if self.learning_rate <= 0:
            raise ValueError(f"PretrainConfig: learning_rate={self.learning_rate} must be > 0")

    def options(self) -> dict:
        """Every option, JSON-ready (recorded in the pair's build stamp)."""
        return _json_ready(self)


@dataclass(frozen=True)
class DistillConfig:
    """How `utils.tiny.distill` trains the tiny draft on the tiny target's greedy answers (see that module).

    The defaults take about two minutes on two CPU cores.
    """

    pages: int = 32  # generated training pages; each is answered for every prompt
    prompts: tuple[str, ...] = ("Text Recognition:", "Read all the text in the image.")
    max_new_tokens: int = 64  # answer budget per (page, prompt)
    steps: int = 100
    sequences_per_step: int = 8
    learning_rate: float = 3e-3
    loss_decay_gamma: float = 4.0
    confidence_alpha: float = 1.0
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "prompts", tuple(self.prompts))
        for name in ("pages", "steps", "sequences_per_step"):
            if getattr(self, name) < 1:
                raise ValueError(f"DistillConfig: {name}={getattr(self, name)} must be >= 1")
        if not self.prompts:
            raise ValueError("DistillConfig: prompts must not be empty")
        if self.max_new_tokens < 2:
            raise ValueError(f"DistillConfig: max_new_tokens={self.max_new_tokens} must be >= 2 "
                             f"(an anchor and a label)")
        for name in ("learning_rate", "loss_decay_gamma"):
            if getattr(self, name) <= 0:
                raise ValueError(f"DistillConfig: {name}={getattr(self, name)} must be > 0")
        if self.confidence_alpha < 0:
            raise ValueError(f"DistillConfig: confidence_alpha={self.confidence_alpha} must be >= 0")

    def options(self) -> dict:
        """Every option, JSON-ready (recorded in the pair's build stamp)."""
        return _json_ready(self)


def build_stamp(config: TinyPairConfig, *, pretrain: PretrainConfig | None = None,
                distill: DistillConfig | None = None) -> dict:
    """What `BUILD_STAMP` holds for a pair: the options, the builder version and how the pair was trained, if it was."""
    stamp = config.to_json()
    if pretrain is not None:
        stamp |= {"pretrain": pretrain.options()}
    if distill is not None:
        stamp |= {"distill": distill.options()}
    return stamp


def _options(stamp: dict) -> dict:
    return {key: value for key, value in stamp.items() if key != "builder_version"}


@dataclass(frozen=True)
class TinyPair:
    """Where a built tiny pair lives."""

    root: Path
    config: TinyPairConfig
    seconds: float = 0.0
    pretrain: PretrainConfig | None = None  # how the target was trained; None: the random target
    distill: DistillConfig | None = None  # how the draft was distilled; None: the random draft

    @property
    def target(self) -> Path:
        return self.root / "target"

    @property
    def draft(self) -> Path:
        return self.root / "draft"


def build_tiny_pair(out: Path | str, config: TinyPairConfig | None = None, *, pretrain: PretrainConfig | None = None,
                    distill: DistillConfig | None = None, overwrite: bool = False) -> TinyPair:
    """Builds the tiny MiniCPM-OCR target and its tiny DSpark draft into `out/target` and `out/draft`, offline.

    Deterministic for a config (same seed, same files, same hashes). An existing pair built with the same
    config and training is reused; one built with other options is an error unless `overwrite`. The
    whole pair is written atomically, so an interrupted build leaves no folder that looks valid.

    Args:
        out: folder that receives `target/`, `draft/` and the build stamp.
        config: sizes and seed; defaults to `TinyPairConfig()`.
        pretrain: train the target to write corpus text (`utils.tiny.pretrain`); None keeps it random.
        distill: train the draft on the target's greedy answers (`utils.tiny.distill`), after the target's
            pretraining; None keeps it random.
        overwrite: rebuild even if `out` holds a pair.
    """
    from utils.tiny.draft import build_tiny_draft
    from utils.tiny.target import build_tiny_target
    from utils.tiny.tokenizer import train_tokenizer

    config = config or TinyPairConfig()
    out = Path(out)
    stamp, expected = out / BUILD_STAMP, build_stamp(config, pretrain=pretrain, distill=distill)
    if stamp.exists() and not overwrite:
        built = json.loads(stamp.read_text())
        if built == expected:
            return TinyPair(out, config, pretrain=pretrain, distill=distill)
        if _options(built) != _options(expected):
            raise FileExistsError(f"{out} holds a tiny pair built with other options ({stamp}); "
                                  f"pass overwrite=True or choose another folder")
        # same options, built by an older builder: rebuilt below
    elif out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out} is not empty and holds no tiny pair; choose an empty folder")

    start = time.perf_counter()
    with atomic_directory(out, overwrite=True) as staging:
        tokenizer = train_tokenizer(config.tokenizer_vocab_size)
        (staging / "target").mkdir()
        (staging / "draft").mkdir()
        build_tiny_target(config, tokenizer, staging / "target")
        if pretrain is not None:
            from utils.tiny.pretrain import pretrain_target

            pretrain_target(staging / "target", pretrain)
        build_tiny_draft(config, tokenizer, staging / "draft")
        if distill is not None:
            from utils.tiny.distill import distill_draft

            distill_draft(staging / "target", staging / "draft", distill)
        (staging / BUILD_STAMP).write_text(json.dumps(expected, indent=2) + "\n")
    return TinyPair(out, config, seconds=time.perf_counter() - start, pretrain=pretrain, distill=distill)


def default_pair(root: Path | str = SHIPPED_PAIR_DIR) -> TinyPair:
    """The embedded default of the notebooks and `python -m utils.ocr`: the pretrained target and its distilled
    draft, shipped in the repository (`utils/tiny/default`) and checked against its manifest's hashes.

    Nothing is trained here: float training gives other bits on another CPU, and every notebook output
    computed from the pair would follow (`utils.tiny.manifest`).

    Args:
        root: the shipped pair's folder.

    Returns:
        The `TinyPair`, with the options it was built with.

    Raises:
        ValueError: a file of the pair is missing or differs from the manifest.
    """
    from utils.tiny.manifest import verify_pair_files

    root = Path(root)
    stamp = verify_pair_files(root)["build"]
    fields = {field.name for field in dataclasses.fields(TinyPairConfig)}
    config = TinyPairConfig(**{key: value for key, value in stamp.items() if key in fields})
    pretrain = PretrainConfig(**stamp["pretrain"]) if "pretrain" in stamp else None
    distill = DistillConfig(**stamp["distill"]) if "distill" in stamp else None
    return TinyPair(root, config, pretrain=pretrain, distill=distill)
