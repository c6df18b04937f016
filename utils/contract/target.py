"""One exported target folder, read once: `ExportedTarget` is what every part of the runtime needs from it.

The folder `utils.export.export_target` writes holds IRs (their names in `utils.contract`), `config.json`,
`generation_config.json`, the tokenizer files and the processor files (`utils.contract.processor`). The pipeline
reads it once with `ExportedTarget.read` and hands the parts their share: the prompt builder and the image
preprocessing take `processor`, the vision encoder `processor.image_processor` (whose `downsample_mode` it checks
against its IR's), the language-model session `language_model`, the decoder `stop_token_ids`, the prompt assembly
`image_token_id`, the draft check the text sizes. The IRs themselves are opened by the part that runs them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from utils.contract import LanguageModelConfig
from utils.contract.processor import TargetProcessor, read_json, read_target_processor

__all__ = ["STOP_TOKENS", "TARGET_CONFIG", "GENERATION_CONFIG", "TYPEWRITER_PAGE", "TypewriterPage", "ExportedTarget",
           "read_stop_token_ids", "read_typewriter_page"]

STOP_TOKENS = ("<|im_end|>",)  # the end of a chat turn stops an answer whatever eos_token_id says
TARGET_CONFIG = "config.json"
GENERATION_CONFIG = "generation_config.json"
_TOKENIZER_JSON = "tokenizer.json"
TYPEWRITER_PAGE = "typewriter_page"  # the config.json field of a target that reads only typewriter pages (the tiny)


def _eos_ids(config: dict) -> list[int]:
    eos = config.get("eos_token_id")
    return eos if isinstance(eos, list) else [] if eos is None else [eos]


def read_stop_token_ids(folder: Path | str, config: dict | None = None) -> tuple[int, ...]:
    """The stop set: every `eos_token_id` of generation_config.json and config.json (top level, where MiniCPM-V 4.6
    keeps it, and text_config), and the ids of the chat's end-of-turn tokens (`STOP_TOKENS`).

    Args:
        folder: a MiniCPM-OCR folder.
        config: its config.json, when the caller has read it already.
    """
    folder = Path(folder)
    if config is None:
        config = read_json(folder / TARGET_CONFIG) if (folder / TARGET_CONFIG).is_file() else {}
    generation = read_json(folder / GENERATION_CONFIG) if (folder / GENERATION_CONFIG).is_file() else {}
    ids = set(_eos_ids(generation) + _eos_ids(config) + _eos_ids(config.get("text_config", {})))
    tokenizer = folder / _TOKENIZER_JSON
    if tokenizer.is_file():
        added = json.loads(tokenizer.read_text(encoding="utf-8")).get("added_tokens", [])
        ids.update(token["id"] for token in added if token.get("content") in STOP_TOKENS)
    if not ids:
        raise ValueError(f"{folder}: no eos_token_id in {GENERATION_CONFIG} or {TARGET_CONFIG}, and no "
                         f"{list(STOP_TOKENS)} in {_TOKENIZER_JSON}: the answer would never stop")
    return tuple(sorted(int(token) for token in ids))


@dataclass(frozen=True)
class TypewriterPage:
    """The one page a typewriter reader reads (the tiny target: `utils.pages.typewriter`): `rows` rows of
    `columns` characters and a blank column, one `cell`-pixel square per character and per image token, and one
    answer token per image token. Read from config.json's `TYPEWRITER_PAGE` field; the real model has none."""

    rows: int
    columns: int
    cell: int

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) in pixels of such a page."""
        return (self.columns + 1) * self.cell, self.rows * self.cell

    def notice(self, size: tuple[int, int]) -> str:
        """One line for an image of another `size`: what the tiny pair reads and how to read other images."""
        return (f"note: this image is {size[0]} x {size[1]} pixels; the tiny pair reads only typewriter pages of "
                f"{self.rows} rows x {self.columns} characters in its own font ({self.size[0]} x {self.size[1]} "
                f"pixels: utils.pages.typewriter.typed_page draws one), so expect no real reading; for other "
                f"documents export and run the real pair (docs/real-checkpoints.md)")

    @classmethod
    def from_config(cls, config: dict, source: Path) -> TypewriterPage | None:
        """The field of a config.json, None when it has none; a ValueError names a malformed one."""
        field = config.get(TYPEWRITER_PAGE)
        if field is None:
            return None
        try:
            page = cls(**{name: int(field[name]) for name in ("rows", "columns", "cell")})
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{source}: {TYPEWRITER_PAGE} must hold whole numbers rows, columns and cell; "
                             f"got {field!r}") from error
        if min(page.rows, page.columns, page.cell) < 1:
            raise ValueError(f"{source}: {TYPEWRITER_PAGE} must hold positive numbers; got {field!r}")
        return page


def read_typewriter_page(folder: Path | str) -> TypewriterPage | None:
    """The one page the target in `folder` reads (its config.json's `TYPEWRITER_PAGE`), None for any image."""
    path = Path(folder) / TARGET_CONFIG
    return TypewriterPage.from_config(read_json(path), path)


@dataclass(frozen=True)
class ExportedTarget:
    """What an exported MiniCPM-OCR target folder holds, read once by `read`."""

    folder: Path
    processor: TargetProcessor  # image settings (as exported), multimodal tokens, chat template, special tokens
    language_model: LanguageModelConfig  # the language-model IR: hidden layers, verify length, prefill chunk
    image_token_id: int  # the prompt positions that receive the image features
    stop_token_ids: tuple[int, ...]  # `read_stop_token_ids`
    hidden_size: int  # of the text model: what a draft's hidden size must be
    vocab_size: int  # embedding rows of the text model
    num_hidden_layers: int  # decoder layers of the text model
    typewriter_page: TypewriterPage | None = None  # the one page a typewriter reader reads; None: any image

    @classmethod
    def read(cls, folder: Path | str) -> ExportedTarget:
        """Reads an exported target folder.

        Raises:
            ValueError: naming the missing file or field (an IR folder of another layout: export it again).
        """
        folder = Path(folder)
        path = folder / TARGET_CONFIG
        if not path.is_file():
            raise ValueError(f"{path} does not exist; export the target first (python -m utils.export target)")
        config = read_json(path)
        text = config.get("text_config", config)
        try:
            sizes = {name: int(text[name]) for name in ("hidden_size", "vocab_size", "num_hidden_layers")}
            image_token_id = int(config["image_token_id"])
        except KeyError as error:
            raise ValueError(f"{path}: field {error.args[0]!r} is missing") from error
        return cls(folder=folder, processor=read_target_processor(folder),
                   language_model=LanguageModelConfig.read(folder), image_token_id=image_token_id,
                   stop_token_ids=read_stop_token_ids(folder, config),
                   typewriter_page=TypewriterPage.from_config(config, path), **sizes)
