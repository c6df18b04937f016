"""The image-processor settings a target is exported with: its files' own, its model card's recipe, or the caller's.

Two settings decide what a page costs and how finely it is read:
- `downsample_mode`: "4x" gives one image token per 2 x 2 patches, "16x" one per 4 x 4 (the ViT window merger
  runs inside the vision tower), so "16x" reads a page with a quarter of the image tokens;
- `max_slice_nums`: how many slices a large page is cut into, besides its overview.

The checkpoint's files (config.json, processor_config.json) give the defaults. The DSpark draft's model card serves
`openbmb/MiniCPM-OCR-1.0` with `--mm-processor-kwargs '{"downsample_mode":"4x","max_slice_nums":9}'`, so that
checkpoint is exported with the card's recipe (`SERVING_RECIPES`) unless the caller chooses, and the export says
so when the recipe overrides its files. A source folder is that checkpoint when a part of its path is the
repository's name (`models/MiniCPM-OCR-1.0`, where `utils.models.download_real_pair` puts it) or its hub cache
folder (`models--openbmb--MiniCPM-OCR-1.0`).

`write_processor_settings` records the choice in the exported folder: `downsample_mode` in config.json (what the
vision IR computes; it is also in the IR's rt_info) and both fields in every section of the processor files (what
the preprocessing, transformers' processor and GenAI read), so that every reader of the folder uses one setting.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from utils.contract.processor import (DOWNSAMPLE_MODES, PREPROCESSOR_CONFIG, PROCESSOR_CONFIG, PROCESSOR_SECTIONS,
                                      load_image_processor_config, read_json)

__all__ = ["MINICPM_OCR_1_0", "SERVING_RECIPES", "ProcessorSettings", "serving_recipe", "choose_processor_settings",
           "write_processor_settings"]

MINICPM_OCR_1_0 = "openbmb/MiniCPM-OCR-1.0"


@dataclass(frozen=True)
class ProcessorSettings:
    """The page-sizing settings of an export, and where each came from ("files", a recipe's name, "option")."""

    downsample_mode: str
    max_slice_nums: int
    origin: tuple[str, str] = ("files", "files")  # of (downsample_mode, max_slice_nums)

    def as_dict(self) -> dict:
        """The settings and their origins, as the export manifest records them."""
        return {"downsample_mode": self.downsample_mode, "max_slice_nums": self.max_slice_nums,
                "chosen_by": dict(zip(("downsample_mode", "max_slice_nums"), self.origin))}


# repository id -> the settings its serving recipe passes (seed 004: the DSpark draft's model card, "Usage with vLLM")
SERVING_RECIPES = {MINICPM_OCR_1_0: ProcessorSettings("4x", 9)}


def serving_recipe(source: Path | str) -> tuple[str, ProcessorSettings] | None:
    """(repository id, recipe) when `source` is a checkpoint with a serving recipe, recognised by its path."""
    parts = set(Path(source).resolve().parts)
    for repo_id, recipe in SERVING_RECIPES.items():
        if repo_id.split("/")[-1] in parts or f"models--{repo_id.replace('/', '--')}" in parts:
            return repo_id, recipe
    return None


def _check(downsample_mode: str | None, max_slice_nums: int | None) -> None:
    if downsample_mode is not None and downsample_mode not in DOWNSAMPLE_MODES:
        raise ValueError(f"downsample_mode={downsample_mode!r}: supported: {', '.join(DOWNSAMPLE_MODES)}")
    if max_slice_nums is not None and (isinstance(max_slice_nums, bool) or not isinstance(max_slice_nums, int)
                                       or max_slice_nums < 1):
        raise ValueError(f"max_slice_nums={max_slice_nums!r} must be a positive integer")


def choose_processor_settings(source: Path | str, *, downsample_mode: str | None = None,
                              max_slice_nums: int | None = None, report=print) -> ProcessorSettings:
    """The settings to export `source` with: each given option, else the serving recipe's, else the files'.

    Args:
        source: the MiniCPM-OCR folder (its processor files, and config.json's `downsample_mode`).
        downsample_mode: "4x" or "16x", or None.
        max_slice_nums: a positive integer, or None.
        report: called with one line when a recipe overrides what the files say.

    Raises:
        ValueError: naming an unsupported value, or files whose two `downsample_mode` disagree.
    """
    _check(downsample_mode, max_slice_nums)
    source = Path(source)
    files = load_image_processor_config(source)
    own = {"downsample_mode": files.downsample_mode, "max_slice_nums": files.max_slice_nums}
    given = {"downsample_mode": downsample_mode, "max_slice_nums": max_slice_nums}
    recipe_name, recipe = serving_recipe(source) or (None, None)
    chosen, origin, overridden = {}, {}, []
    for name, value in own.items():
        if given[name] is not None:
            chosen[name], origin[name] = given[name], "option"
        elif recipe is not None:
            chosen[name], origin[name] = getattr(recipe, name), recipe_name
            if chosen[name] != value:
                overridden.append(f"{name}={value!r} -> {chosen[name]!r}")
        else:
            chosen[name], origin[name] = value, "files"
    config_mode = read_json(source / "config.json").get("downsample_mode")
    if origin["downsample_mode"] == "files" and config_mode not in (None, files.downsample_mode):
        raise ValueError(f"{source}: config.json says downsample_mode={config_mode!r}, {files.source.name} says "
                         f"{files.downsample_mode!r}; pass --downsample-mode to choose one")
    if overridden:
        report(f"{recipe_name}: exporting with its model card's serving recipe ({', '.join(overridden)}; the files "
               f"say otherwise); pass --downsample-mode / --max-slice-nums to choose")
    return ProcessorSettings(chosen["downsample_mode"], chosen["max_slice_nums"],
                             (origin["downsample_mode"], origin["max_slice_nums"]))


def write_processor_settings(folder: Path | str, settings: ProcessorSettings) -> None:
    """Writes `settings` into the exported folder's config.json and processor files (those it has)."""
    folder = Path(folder)
    config = read_json(folder / "config.json")
    config["downsample_mode"] = settings.downsample_mode
    _write_json(folder / "config.json", config)
    fields = {"downsample_mode": settings.downsample_mode, "max_slice_nums": settings.max_slice_nums}
    if (folder / PROCESSOR_CONFIG).is_file():
        processor = read_json(folder / PROCESSOR_CONFIG)
        for section in PROCESSOR_SECTIONS:
            if isinstance(processor.get(section), dict):
                processor[section] |= fields
        _write_json(folder / PROCESSOR_CONFIG, processor)
    if (folder / PREPROCESSOR_CONFIG).is_file():
        _write_json(folder / PREPROCESSOR_CONFIG, read_json(folder / PREPROCESSOR_CONFIG) | fields)


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
