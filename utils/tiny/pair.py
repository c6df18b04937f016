"""The one entry point that builds the tiny target + draft pair, and the shipped default pair."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from utils.files import atomic_directory
from utils.tiny.config import (BUILD_STAMP, READING_DISTILL, READING_PAIR, Checkpoints, DistillConfig, PretrainConfig,
                               ReaderConfig, TinyPairConfig)
from utils.tiny.tokenizer import BYTE_VOCABULARY

if TYPE_CHECKING:  # the reader imports torch; the builder imports it only when it trains
    from utils.tiny.reader import FirstPhase, ReaderReport

__all__ = ["TinyPairConfig", "PretrainConfig", "ReaderConfig", "DistillConfig", "TinyPair", "build_tiny_pair",
           "build_stamp", "first_phase_reader", "character_reader", "character_config", "shipped_recipe",
           "default_pair", "BUILD_STAMP", "SHIPPED_PAIR_DIR"]

SHIPPED_PAIR_DIR = Path(__file__).resolve().parent / "default"  # the default pair, shipped in the repository


def shipped_recipe() -> dict:
    """The options the shipped pair is built with (`utils.tiny.manifest.REBUILD_COMMAND`): the reading sizes, the
    reader's training and the reading distillation, as keyword arguments of `build_tiny_pair` and `build_stamp`."""
    return {"config": TinyPairConfig(**READING_PAIR), "read": ReaderConfig(),
            "distill": DistillConfig(**READING_DISTILL)}


def build_stamp(config: TinyPairConfig, *, pretrain: PretrainConfig | None = None, read: ReaderConfig | None = None,
                distill: DistillConfig | None = None) -> dict:
    """What `BUILD_STAMP` holds for a pair: the options, the builder version and how the pair was trained, if it was."""
    stamp = config.to_json()
    if pretrain is not None:
        stamp |= {"pretrain": pretrain.options()}
    if read is not None:
        stamp |= {"read": read.options()}
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
    pretrain: PretrainConfig | None = None  # how the target was trained to write; None: not so
    distill: DistillConfig | None = None  # how the draft was distilled; None: the random draft
    read: ReaderConfig | None = None  # how the target was trained to read; None: not so
    reading: ReaderReport | None = None  # what the reading training measured, for a build that just trained one

    @property
    def target(self) -> Path:
        return self.root / "target"

    @property
    def draft(self) -> Path:
        return self.root / "draft"


def first_phase_reader(pair: Path | str, config: TinyPairConfig, read: ReaderConfig) -> FirstPhase:
    """The reader of the shipped-style pair in `pair` as the first phase of `read` (`train_reader` then only
    refines it), after checking that it is one: its files match its manifest, and its build stamp records the sizes
    of `config` and the first phase of `read` (`ReaderConfig.first_phase_options`). Else a ValueError names what
    differs."""
    return _trained_reader(pair, build_stamp(config), read.first_phase_options(), phase="first phase",
                           refined=False)


def character_reader(pair: Path | str, config: TinyPairConfig, read: ReaderConfig) -> FirstPhase:
    """The reader of the shipped-style pair in `pair` as the one-token-per-character reader `read`'s merges start
    from (`train_merges`), after checking that it is one: its files match its manifest, its target has the sizes of
    `config` with one token per character (`character_config`; the draft's sizes do not matter), and its reader was
    trained as `read` says before the merges (`ReaderConfig.character_reader_options`). Else a ValueError names what
    differs."""
    wanted = {key: value for key, value in build_stamp(character_config(config)).items() if key not in _DRAFT_SIZES}
    return _trained_reader(pair, wanted, read.character_reader_options(), phase="reader of one token per character",
                           refined=bool(read.refine_steps))


_DRAFT_SIZES = ("draft_vocab_size", "block_size", "target_layer_ids", "markov_rank", "draft_num_layers")


def character_config(config: TinyPairConfig) -> TinyPairConfig:
    """`config` with one token per character (`BYTE_VOCABULARY`, which no pre-tokenizer changes) and the reading
    pair's draft vocabulary: the sizes of the reader a pair with merges grows from."""
    return dataclasses.replace(config, tokenizer_vocab_size=BYTE_VOCABULARY, vocab_size=None,
                               draft_vocab_size=READING_PAIR["draft_vocab_size"], pre_tokenizer="gpt2")


def _trained_reader(pair: Path | str, sizes: dict, options: dict, *, phase: str, refined: bool) -> FirstPhase:
    """The reader of `pair` if its files match its manifest, its build stamp holds `sizes` and its reading options are
    `options` (refined as `refined` says); else a ValueError naming what differs."""
    from utils.tiny.manifest import verify_pair_files
    from utils.tiny.reader import FirstPhase

    pair = Path(pair)
    manifest = verify_pair_files(pair)
    built = manifest["build"]
    differing = [key for key in sizes if key != "builder_version" and built.get(key) != sizes[key]]
    if differing:
        raise ValueError(f"{pair}: its target was built with other sizes ({', '.join(differing)}); it cannot be the "
                         f"{phase} this reader needs")
    if "read" not in built:
        raise ValueError(f"{pair}: its target was never trained to read")
    differing = [key for key in options if built["read"].get(key) != options[key]]
    if differing or bool(built["read"].get("refine_steps")) != refined:
        reason = ", ".join(differing) or ("it was refined already" if not refined else "it was not refined")
        raise ValueError(f"{pair}: its reader was trained otherwise than the {phase} this reader needs ({reason})")
    return FirstPhase(pair / "target", manifest["training"]["reading"])


def build_tiny_pair(out: Path | str, config: TinyPairConfig | None = None, *, pretrain: PretrainConfig | None = None,
                    read: ReaderConfig | None = None, distill: DistillConfig | None = None,
                    reader_from: Path | str | None = None, checkpoint_dir: Path | str | None = None,
                    overwrite: bool = False) -> TinyPair:
    """Builds the tiny MiniCPM-OCR target and its tiny DSpark draft into `out/target` and `out/draft`, offline.

    Deterministic for a config (same seed, same files, same hashes). An existing pair built with the same
    config and training is reused; one built with other options is an error unless `overwrite`. The
    whole pair is written atomically, so an interrupted build leaves no folder that looks valid.

    Args:
        out: folder that receives `target/`, `draft/` and the build stamp.
        config: sizes and seed; defaults to `TinyPairConfig()`.
        pretrain: train the target to write corpus text (`utils.tiny.pretrain`, the recipe before the reader);
            None keeps it random.
        read: train the target to read typewriter pages instead (`utils.tiny.reader`, the shipped recipe); the
            build then returns the training's report (`TinyPair.reading`).
        distill: train the draft on the target's greedy answers (`utils.tiny.distill`), after the target's
            training; None keeps it random.
        reader_from: a shipped-style pair whose reader is the first phase of `read` (`first_phase_reader`): only
            the refining runs, and gives the bits a whole training gives on the machine that trained that reader.
        checkpoint_dir: the reader's and the draft's trainings save checkpoints there (`utils.tiny.training`) and
            resume from those of a build with the same options: a build cut short goes on where it stopped.
        overwrite: rebuild even if `out` holds a pair.
    """
    from utils.tiny.draft import build_tiny_draft
    from utils.tiny.target import build_tiny_target
    from utils.tiny.tokenizer import train_tokenizer

    if pretrain is not None and read is not None:
        raise ValueError("build_tiny_pair: choose one training of the target, pretrain (write) or read")
    if reader_from is not None and read is None:
        raise ValueError("build_tiny_pair: reader_from needs read (the reader it refines)")
    config = config or TinyPairConfig()
    if read is not None and read.merge_steps and config.tokenizer_vocab_size == BYTE_VOCABULARY:
        raise ValueError("build_tiny_pair: a reader learns merges only with a tokenizer that has some "
                         f"(tokenizer_vocab_size > {BYTE_VOCABULARY})")
    start_from = character_reader if read is not None and read.merge_steps else first_phase_reader
    first_phase = start_from(reader_from, config, read) if reader_from is not None else None
    out = Path(out)
    stamp, expected = out / BUILD_STAMP, build_stamp(config, pretrain=pretrain, read=read, distill=distill)
    if stamp.exists() and not overwrite:
        built = json.loads(stamp.read_text())
        if built == expected:
            return TinyPair(out, config, pretrain=pretrain, distill=distill, read=read)
        if _options(built) != _options(expected):
            raise FileExistsError(f"{out} holds a tiny pair built with other options ({stamp}); "
                                  f"pass overwrite=True or choose another folder")
        # same options, built by an older builder: rebuilt below
    elif out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out} is not empty and holds no tiny pair; choose an empty folder")

    start = time.perf_counter()
    with atomic_directory(out, overwrite=True) as staging:
        tokenizer = train_tokenizer(config.tokenizer_vocab_size, pre_tokenizer=config.pre_tokenizer)
        (staging / "target").mkdir()
        (staging / "draft").mkdir()
        build_tiny_target(config, tokenizer, staging / "target")
        if pretrain is not None:
            from utils.tiny.pretrain import pretrain_target

            pretrain_target(staging / "target", pretrain)
        reading = None
        if read is not None:
            from utils.tiny.reader import mark_typewriter_reader

            reading = _train_reading(staging, config, read, first_phase,
                                     _checkpoints(checkpoint_dir, build_stamp(config, read=read)))
            mark_typewriter_reader(staging / "target")
        build_tiny_draft(config, tokenizer, staging / "draft")
        if distill is not None:
            from utils.tiny.distill import distill_draft

            distill_draft(staging / "target", staging / "draft", distill,
                          checkpoints=_checkpoints(checkpoint_dir, expected))
        (staging / BUILD_STAMP).write_text(json.dumps(expected, indent=2) + "\n")
    return TinyPair(out, config, seconds=time.perf_counter() - start, pretrain=pretrain, distill=distill, read=read,
                    reading=reading)


def _train_reading(staging: Path, config: TinyPairConfig, read: ReaderConfig, start: FirstPhase | None,
                   checkpoints: Checkpoints | None) -> ReaderReport:
    """Trains `staging/target` to read as `read` says, from `start` if given. With merges, a reader of one token per
    character is trained first in a folder of its own (unless `start` is one), then grown into the target and taught
    the merges (`train_merges`); its folder is removed, so the pair holds the grown reader alone."""
    from utils.tiny.reader import FirstPhase, train_merges, train_reader

    if not read.merge_steps:
        return train_reader(staging / "target", read, first_phase=start, checkpoints=checkpoints)
    if start is None:
        from utils.tiny.target import build_tiny_target
        from utils.tiny.tokenizer import train_tokenizer

        folder = staging / "character-reader"
        folder.mkdir()
        build_tiny_target(character_config(config), train_tokenizer(BYTE_VOCABULARY), folder)
        start = FirstPhase(folder, train_reader(folder, read, checkpoints=checkpoints).as_dict())
    reading = train_merges(staging / "target", start, read, checkpoints=checkpoints)
    shutil.rmtree(staging / "character-reader", ignore_errors=True)
    return reading


def _checkpoints(folder: Path | str | None, options: dict) -> Checkpoints | None:
    """Checkpoints in `folder` of a training decided by `options` (None: no checkpoints)."""
    return None if folder is None else Checkpoints(Path(folder), options=options)


def default_pair(root: Path | str = SHIPPED_PAIR_DIR) -> TinyPair:
    """The embedded default of the notebooks and `python -m utils.ocr`: the target trained to read typewriter pages
    and its distilled draft, shipped in the repository (`utils/tiny/default`) and checked against its manifest's hashes.

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
    read = ReaderConfig(**stamp["read"]) if "read" in stamp else None
    return TinyPair(root, config, pretrain=pretrain, distill=distill, read=read)
