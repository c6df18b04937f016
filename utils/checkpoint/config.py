"""The DSpark draft's `config.json`, read flat or with fields nested under `dflash_config`.

The published openbmb/MiniCPM-OCR-1.0-DSpark nests target layer ids, the mask token and the Markov rank
under `dflash_config`; DeepSpec writes them flat. Both are accepted; a field given in both places with two
values is an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DRAFT_CONFIG", "INFERABLE", "DSparkConfig", "DraftValidationError", "check_layer_ids"]

DRAFT_CONFIG = "config.json"
_NESTABLE = ("target_layer_ids", "mask_token_id", "block_size", "markov_rank", "markov_head_type",
             "enable_confidence_head", "confidence_head_with_markov")
# Fields a published config.json may leave out although the tensors imply them (`checkpoint.load_draft_checkpoint`
# reads them from the tensors then): head_dim (256 for the real draft, not hidden / heads = 128) and the
# confidence-head flags.
INFERABLE = ("head_dim", "enable_confidence_head", "confidence_head_with_markov")


class DraftValidationError(ValueError):
    """A draft folder that cannot be used as it is: the message names the file, the field and what was expected."""


def check_layer_ids(layer_ids, *, field: str, num_layers: int | None = None, source: str | None = None,
                    error: type[ValueError] = ValueError, note: str | None = None) -> tuple[int, ...]:
    """Checks decoder layer ids: at least one, none twice, each in [0, num_layers); returns them as ints.

    The one check of a draft's target layers (config.json, the tiny pair) and of the layers a language-model
    export outputs.

    Args:
        layer_ids: the ids, in the order their outputs are concatenated.
        field: the option that holds them ("target_layer_ids"), named in the message.
        num_layers: layers to choose from (None: the range is not checked, e.g. a config.json without its target).
        source: what the ids came from (a file, a class), the message's prefix.
        error: the exception raised (`DraftValidationError` for a draft folder).
        note: why the range is what it is, appended to the out-of-range message.

    Raises:
        error: naming the field and what is wrong.
    """
    def fail(message):
        raise error(message if source is None else f"{source}: {message}")

    layer_ids = tuple(int(layer_id) for layer_id in layer_ids)
    if not layer_ids:
        fail(f"{field} must not be empty")
    if len(set(layer_ids)) != len(layer_ids):
        fail(f"{field}={list(layer_ids)} repeats a layer")
    for layer_id in layer_ids:
        if num_layers is not None and not 0 <= layer_id < num_layers:
            noun = field.removesuffix("s").replace("_", " ")  # target_layer_ids -> "target layer id"
            fail(f"{noun} {layer_id} is out of range [0, {num_layers - 1}]" + (f" ({note})" if note else ""))
    return layer_ids


@dataclass(frozen=True)
class DSparkConfig:
    """What the reference draft, the exporter and the runtime need from a DSpark `config.json`."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    vocab_size: int  # input vocabulary: what `markov_w1` and the mask/anchor ids index
    draft_vocab_size: int  # what `lm_head` predicts; < vocab_size means a pruned vocabulary
    block_size: int
    target_layer_ids: tuple[int, ...]
    mask_token_id: int
    markov_rank: int
    markov_head_type: str
    enable_confidence_head: bool
    confidence_head_with_markov: bool
    attention_bias: bool = False
    hidden_act: str = "silu"
    defaulted: frozenset[str] = field(default=frozenset(), compare=False)  # INFERABLE fields config.json lacked

    @property
    def is_pruned(self) -> bool:
        """True when the draft predicts only part of the target vocabulary (and so needs `lm_head` and `d2t`)."""
        return self.draft_vocab_size < self.vocab_size

    @property
    def markov_top_k(self) -> int:
        """K of the Top-K candidate scorer: at most one candidate per draft token."""
        return min(64, self.draft_vocab_size)

    @classmethod
    def from_dict(cls, raw: dict, *, source: str = DRAFT_CONFIG) -> "DSparkConfig":
        """Reads a config dict (flat or nested) and checks every field the draft depends on."""
        fields = _flatten(raw, source)

        def need(name):
            if name not in fields:
                raise DraftValidationError(f"{source}: field '{name}' is missing")
            return fields[name]

        architectures = fields.get("architectures") or []
        if architectures and "DSpark" not in architectures[0]:
            raise DraftValidationError(f"{source}: architectures={architectures} is not a DSpark draft "
                                       f"(expected ['Qwen3DSparkModel'])")
        hidden = int(need("hidden_size"))
        heads = int(need("num_attention_heads"))
        rope_theta = fields.get("rope_theta", (fields.get("rope_parameters") or {}).get("rope_theta", 1e6))
        vocab_size = int(need("vocab_size"))
        config = cls(
            hidden_size=hidden,
            intermediate_size=int(need("intermediate_size")),
            num_hidden_layers=int(need("num_hidden_layers")),
            num_attention_heads=heads,
            num_key_value_heads=int(fields.get("num_key_value_heads", heads)),
            head_dim=int(fields.get("head_dim") or hidden // heads),
            rms_norm_eps=float(fields.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope_theta),
            vocab_size=vocab_size,
            draft_vocab_size=int(fields.get("draft_vocab_size", vocab_size)),
            block_size=int(need("block_size")),
            target_layer_ids=tuple(int(i) for i in need("target_layer_ids")),
            mask_token_id=int(need("mask_token_id")),
            markov_rank=int(fields.get("markov_rank", 0)),
            markov_head_type=str(fields.get("markov_head_type", "vanilla")),
            enable_confidence_head=bool(fields.get("enable_confidence_head", False)),
            confidence_head_with_markov=bool(fields.get("confidence_head_with_markov", False)),
            attention_bias=bool(fields.get("attention_bias", False)),
            hidden_act=str(fields.get("hidden_act", "silu")),
            defaulted=frozenset(name for name in INFERABLE if fields.get(name) is None),
        )
        config._validate(source)
        return config

    @classmethod
    def from_folder(cls, folder: Path | str) -> "DSparkConfig":
        """Reads `folder/config.json`."""
        path = Path(folder) / DRAFT_CONFIG
        if not path.is_file():
            raise DraftValidationError(f"{path}: not found; a DSpark draft folder holds config.json")
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise DraftValidationError(f"{path}: not valid JSON ({error})") from error
        return cls.from_dict(raw, source=str(path))

    def _validate(self, source: str) -> None:
        def fail(message):
            raise DraftValidationError(f"{source}: {message}")

        if self.vocab_size < 1:
            fail(f"vocab_size={self.vocab_size} must be positive")
        if not 1 <= self.draft_vocab_size <= self.vocab_size:
            fail(f"draft_vocab_size={self.draft_vocab_size} must be in [1, vocab_size={self.vocab_size}]")
        if self.block_size < 1:
            fail(f"block_size={self.block_size} must be >= 1")
        check_layer_ids(self.target_layer_ids, field="target_layer_ids", source=source, error=DraftValidationError)
        if not 0 <= self.mask_token_id < self.vocab_size:
            fail(f"mask_token_id={self.mask_token_id} is outside the vocabulary [0, {self.vocab_size})")
        if self.markov_rank < 0:
            fail(f"markov_rank={self.markov_rank} must be >= 0")
        if self.markov_rank and self.markov_head_type != "vanilla":
            fail(f"markov_head_type='{self.markov_head_type}' is not supported (only 'vanilla')")
        if self.confidence_head_with_markov and not self.markov_rank:
            fail("confidence_head_with_markov needs a Markov head (markov_rank > 0)")
        if self.num_attention_heads % self.num_key_value_heads:
            fail(f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                 f"num_key_value_heads={self.num_key_value_heads}")


def _flatten(raw: dict, source: str) -> dict:
    nested = raw.get("dflash_config") or {}
    fields = {key: value for key, value in raw.items() if key != "dflash_config"}
    for key, value in nested.items():
        if key in fields and key in _NESTABLE and fields[key] != value:
            raise DraftValidationError(f"{source}: '{key}' is {fields[key]!r} at top level but {value!r} in "
                                       f"dflash_config")
        fields.setdefault(key, value)
    return fields
