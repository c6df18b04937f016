"""The one entry point that builds the tiny target + draft pair, and the shipped default pair."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from utils.files import atomic_directory
from utils.tiny.config import (BUILD_STAMP, READING_DISTILL, READING_PAIR, Checkpoints, DistillConfig, PretrainConfig,
                               ReaderConfig, TinyPairConfig)

if TYPE_CHECKING:  # the reader imports torch; the builder imports it only when it trains
    from utils.tiny.reader import FirstPhase, ReaderReport

__all__ = ["TinyPairConfig", "PretrainConfig", "ReaderConfig", "DistillConfig", "TinyPair", "build_tiny_pair",
           "build_stamp", "first_phase_reader", "shipped_recipe", "default_pair", "BUILD_STAMP", "SHIPPED_PAIR_DIR"]

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
    from utils.tiny.manifest import verify_pair_files
    from utils.tiny.reader import FirstPhase

    pair = Path(pair)
    manifest = verify_pair_files(pair)
    built, wanted = manifest["build"], build_stamp(config)
    sizes = [key for key in wanted if key != "builder_version" and built.get(key) != wanted[key]]
    if sizes:
        raise ValueError(f"{pair}: its target was built with other sizes ({', '.join(sizes)}); it cannot be the first "
                         f"phase of this reader")
    if "read" not in built:
        raise ValueError(f"{pair}: its target was never trained to read")
    wanted_read = read.first_phase_options()
    options = [key for key in wanted_read if built["read"].get(key) != wanted_read[key]]
    if options or built["read"].get("refine_steps"):
        raise ValueError(f"{pair}: its reader was trained otherwise than this reader's first phase "
                         f"({', '.join(options) or 'it was refined already'})")
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
    first_phase = first_phase_reader(reader_from, config, read) if reader_from is not None else None
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
        tokenizer = train_tokenizer(config.tokenizer_vocab_size)
        (staging / "target").mkdir()
        (staging / "draft").mkdir()
        build_tiny_target(config, tokenizer, staging / "target")
        if pretrain is not None:
            from utils.tiny.pretrain import pretrain_target

            pretrain_target(staging / "target", pretrain)
        reading = None
        if read is not None:
            from utils.tiny.reader import mark_typewriter_reader, train_reader

            reading = train_reader(staging / "target", read, first_phase=first_phase,
                                   checkpoints=_checkpoints(checkpoint_dir, build_stamp(config, read=read)))
            mark_typewriter_reader(staging / "target")
        build_tiny_draft(config, tokenizer, staging / "draft")
        if distill is not None:
            from utils.tiny.distill import distill_draft

            distill_draft(staging / "target", staging / "draft", distill,
                          checkpoints=_checkpoints(checkpoint_dir, expected))
        (staging / BUILD_STAMP).write_text(json.dumps(expected, indent=2) + "\n")
    return TinyPair(out, config, seconds=time.perf_counter() - start, pretrain=pretrain, distill=distill, read=read,
                    reading=reading)


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
