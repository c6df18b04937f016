"""An exported DSpark draft folder, read once: config.json and both IRs with their rt_info, checked against each
other (and, by `check_fits`, against the target), then handed to each part of the runtime that runs it.

It sits in the contract beside `utils.contract.target.ExportedTarget`: what a draft folder must hold, and the clear
error for a folder that does not, whatever runs it afterwards (`utils.engine.draft`, the notebooks' panels).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import openvino as ov

from utils.checkpoint.config import DRAFT_CONFIG, DSparkConfig
from utils.checkpoint.draft import TargetSpec, check_config_fits_target
from utils.contract import DRAFT_MODEL, MARKOV_HEAD_MODEL, DraftInfo, draft_cache_layout_is_current, read_draft_info
from utils.contract.core import openvino_core
from utils.contract.target import ExportedTarget

__all__ = ["ExportedDraft"]


def _read(folder: Path | str, name: str) -> ov.Model:
    path = Path(folder) / name
    if not path.is_file():
        raise ValueError(f"{path} does not exist; export the draft first (python -m utils.export draft ...)")
    try:
        return openvino_core().read_model(path)
    except RuntimeError as error:  # a truncated or foreign file: say which, not OpenVINO's parser stack
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise ValueError(f"{path}: OpenVINO cannot read this IR ({first_line}); export the draft again") from error



# The config.json fields the exporter also wrote into both IRs' rt_info: a folder where they differ mixes exports.
_STATED_TWICE = ("block_size", "target_layer_ids", "mask_token_id", "vocab_size", "draft_vocab_size", "markov_rank")


@dataclass(frozen=True)
class ExportedDraft:
    """What an exported DSpark draft folder holds, read once by `read` and handed to each part that runs it."""

    folder: Path
    config: DSparkConfig  # config.json as exported (the block size stated once, at the top level)
    info: DraftInfo  # the `dspark/*` rt_info both IRs carry: what the runtime drives them with
    draft_model: ov.Model  # `DRAFT_MODEL`, read, not compiled
    markov_head: ov.Model  # `MARKOV_HEAD_MODEL`, read, not compiled

    @classmethod
    def read(cls, folder: Path | str) -> ExportedDraft:
        """Reads an exported draft folder (`python -m utils.export draft`).

        Raises:
            ValueError: naming the missing file or rt_info key, or a field on which config.json and the IRs (or the
                two IRs) disagree: a folder that mixes two exports; or a backbone exported by older code, whose
                context cache has another layout. Export the draft again.
        """
        folder = Path(folder)
        if not (folder / DRAFT_CONFIG).is_file():
            raise ValueError(f"{folder / DRAFT_CONFIG} does not exist; export the draft first "
                             f"(python -m utils.export draft ...)")
        config = DSparkConfig.from_folder(folder)
        models = [_read(folder, name) for name in (DRAFT_MODEL, MARKOV_HEAD_MODEL)]
        if not draft_cache_layout_is_current(models[0]):
            raise ValueError(f"{folder / DRAFT_MODEL} was exported by older code (its context cache is laid out "
                             f"sequence-major, copied at every call); export the draft again")
        info, head_info = (read_draft_info(model, source=str(folder / name))
                           for model, name in zip(models, (DRAFT_MODEL, MARKOV_HEAD_MODEL)))
        if head_info != info:
            fields = [item.name for item in dataclasses.fields(DraftInfo)
                      if getattr(info, item.name) != getattr(head_info, item.name)]
            raise ValueError(f"{folder}: {DRAFT_MODEL} and {MARKOV_HEAD_MODEL} were exported with different "
                             f"{', '.join(fields)}; the folder mixes two exports: export the draft again")
        for name in _STATED_TWICE:
            stated, exported = getattr(config, name), getattr(info, name)
            if stated != exported:
                raise ValueError(f"{folder / DRAFT_CONFIG}: {name}={stated}, but the IRs were exported with "
                                 f"{name}={exported}; the folder mixes two exports: export the draft again")
        return cls(folder, config, info, *models)

    @classmethod
    def of(cls, draft: ExportedDraft | Path | str) -> ExportedDraft:
        """`draft` itself if already read, else `read(draft)`."""
        return draft if isinstance(draft, ExportedDraft) else cls.read(draft)

    def check_fits(self, target: ExportedTarget) -> None:
        """Refuses a draft made for another target, naming the field (hidden size, vocabulary, layers read).

        Raises:
            ValueError: (`DraftValidationError`) the draft does not fit `target`.
        """
        source = str(self.folder / DRAFT_CONFIG)
        check_config_fits_target(self.config, TargetSpec(target.hidden_size, target.vocab_size,
                                                         target.num_hidden_layers), source=source)
        exported_for = list(target.language_model.hidden_layer_ids)
        if list(self.info.target_layer_ids) != exported_for:
            raise ValueError(f"{source}: the draft reads target layers {list(self.info.target_layer_ids)}, but "
                             f"{target.folder} was exported for layers {exported_for}")
