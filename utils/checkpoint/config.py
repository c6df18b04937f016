"""The DSpark draft's `config.json`, read flat or with fields nested under `dflash_config`, as its trainer meant them.

Where the fields live. DeepSpec, which trains DSpark drafts, writes every DSpark field at the top level:
`build_draft_config` (deepspec/modeling/dspark/qwen3/config.py) copies the target's config and sets
`block_size`, `mask_token_id`, `target_layer_ids`, `markov_rank`, `markov_head_type`, `enable_confidence_head` and
`confidence_head_with_markov` on it, and `Qwen3DSparkModel` (deepspec/modeling/dspark/qwen3/modeling.py) reads
them from there. DFlash-family checkpoints and the published openbmb/MiniCPM-OCR-1.0-DSpark nest some of them
under `dflash_config`, which vLLM's DFlash/DSpark loader reads first (vllm/model_executor/models/qwen3_dflash.py:
`dflash_config.get("mask_token_id", config.mask_token_id)`; vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:
`get_eagle3_aux_layers_from_config` takes `dflash_config.target_layer_ids` before the top-level ids) and which
sizes a DSpark block by the request's `num_speculative_tokens` (vllm/v1/spec_decode/dspark.py: the anchor, then
masks, one draft per position).

The drafts per step (`DSparkConfig.block_size`: a block's positions, the anchor included, each predicting one token,
the anchor's the first) are taken from the first of these that the file states (`drafts_per_step_fields`):
1. `num_speculative_tokens` (top level), then `speculators_config.proposal_methods[0].speculative_tokens`: what
   vLLM runs (vllm/v1/spec_decode/dspark.py drafts `num_speculative_tokens` tokens; the speculators format maps
   `speculative_tokens` to it) and what a model card names ("Draft tokens per forward pass").
2. the top-level `block_size`: DeepSpec's "number of draft positions per anchor" (deepspec/modeling/dspark/common.py;
   its evaluator proposes `block_size` tokens and verifies them with the anchor).
3. `dflash_config.block_size` with `sample_from_anchor` stated: speculators' rule (speculators/models/dflash/core.py:
   `block_size if sample_from_anchor else block_size - 1`).
4. `dflash_config.block_size` alone is **ambiguous**: z-lab's DFlash counts the anchor in it (drafts = block_size - 1),
   speculators' DSpark configs (whose `sample_from_anchor` defaults to true) count drafts. Read the DFlash way, the
   field's own project's, unless the folder is a published draft whose model card states the drafts per step
   (`PUBLISHED_DRAFTS_PER_STEP`), which picks the reading that matches; a warning says which and why.
`drafts_per_step=` (`python -m utils.export draft --drafts-per-step N`) overrides them all. A stated field that
disagrees with the one used gets a warning naming both; a published draft read to another count than its card's is
refused. A nested `block_size` one more than the count agrees with it (DFlash's width).
`sample_from_anchor: false` is refused: the anchor is then a bonus token and only the masks predict (speculators'
1 + N block, vLLM's `dspark_bonus_anchor`), a block this suite's engine does not run.

The other fields that may appear in both places: `target_layer_ids` (target decoder layers whose outputs `fc`
concatenates, in order; layer i is HF `hidden_states[i + 1]`), `mask_token_id` (the target id filling the block after
the anchor), `markov_rank` (r of the Markov head, 0 for none), `markov_head_type` ("vanilla"),
`enable_confidence_head`, `confidence_head_with_markov` (the head reads `[h ; markov_w1[prev]]`, not `h` alone): one
meaning in both places. Where both are given and differ, the top level is used, as DeepSpec reads it, with a warning
naming both values and vLLM's choice (vLLM reads `dflash_config` first; optimum-intel refuses the file).

A field only under `dflash_config` is read from there. Rotary embedding: DeepSpec's draft uses transformers'
`Qwen3RotaryEmbedding`, which for the default rope type rotates every dimension of `head_dim` with `rope_theta`
and ignores a `partial_rotary_factor` the copied target config carries (vLLM's `get_rope` would honour it); the
suite follows the trainer and warns once when the config names a partial factor or a rope type it does not apply.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DRAFT_CONFIG", "INFERABLE", "PUBLISHED_DRAFTS_PER_STEP", "DSparkConfig", "DraftValidationError",
           "check_layer_ids", "drafts_per_step_fields", "published_repository"]

DRAFT_CONFIG = "config.json"
_NESTABLE = ("target_layer_ids", "mask_token_id", "markov_rank", "markov_head_type", "enable_confidence_head",
             "confidence_head_with_markov")
# Published drafts whose model card states the drafts per step; a reading of their config.json is checked against it.
PUBLISHED_DRAFTS_PER_STEP = {"openbmb/MiniCPM-OCR-1.0-DSpark": 15}  # its card: "Draft tokens per forward pass 15"
_APPLIED_ROPE_TYPES = ("default",)  # rotary types the draft applies (plain RoPE over every dimension)
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
    def from_dict(cls, raw: dict, *, source: str = DRAFT_CONFIG, drafts_per_step: int | None = None,
                  repository: str | None = None) -> "DSparkConfig":
        """Reads a config dict (flat or nested, see the module's docstring) and checks every field the draft depends on.

        Warns (once per message) when a field has two values, when the drafts per step are read from an ambiguous
        field, or when the rotary settings name what the draft does not apply.

        Args:
            raw: the parsed config.json.
            source: what it came from, for messages.
            drafts_per_step: the drafts per step, overriding every field that states them.
            repository: the published repository the file belongs to, if known (`published_repository`).
        """
        fields = _flatten(raw, source)
        block_size = _drafts_per_step(raw, source, drafts_per_step, repository)
        if block_size is not None:
            fields["block_size"] = block_size
        _warn_about_rope(fields, source)

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
    def from_folder(cls, folder: Path | str, *, drafts_per_step: int | None = None) -> "DSparkConfig":
        """Reads `folder/config.json` (`drafts_per_step` as in `from_dict`)."""
        path = Path(folder) / DRAFT_CONFIG
        if not path.is_file():
            raise DraftValidationError(f"{path}: not found; a DSpark draft folder holds config.json")
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise DraftValidationError(f"{path}: not valid JSON ({error})") from error
        return cls.from_dict(raw, source=str(path), drafts_per_step=drafts_per_step,
                             repository=published_repository(folder, raw))

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
    """The fields with the nested ones merged in, the top level first (the drafts per step aside:
    `_drafts_per_step`); one warning per field given twice with two values."""
    nested = {key: value for key, value in (raw.get("dflash_config") or {}).items() if key != "block_size"}
    fields = {key: value for key, value in raw.items() if key not in ("dflash_config", "block_size")}
    for key, value in nested.items():
        if key in fields and key in _NESTABLE and fields[key] != value:
            warnings.warn(f"{source}: {key} is {fields[key]!r} at the top level and {value!r} under dflash_config: "
                          f"using the top level's, as DeepSpec (which trains DSpark drafts) reads it; vLLM would use "
                          f"dflash_config's", UserWarning, stacklevel=4)
        fields.setdefault(key, value)
    return fields


def published_repository(folder: Path | str, raw: dict) -> str | None:
    """The published draft a folder holds, if it is one of `PUBLISHED_DRAFTS_PER_STEP`: named by the config's
    `_name_or_path`, by the folder (`models/MiniCPM-OCR-1.0-DSpark`, `utils.models`) or by the hub cache's folder."""
    parts = Path(folder).resolve().parts
    for repository in PUBLISHED_DRAFTS_PER_STEP:
        cache = "models--" + repository.replace("/", "--")
        if raw.get("_name_or_path") == repository or repository.split("/")[1] == parts[-1] or cache in parts:
            return repository
    return None


def drafts_per_step_fields(raw: dict) -> list[tuple[str, int]]:
    """The fields that state the drafts per step outright, in the order they are read: (name, drafts)."""
    methods = (raw.get("speculators_config") or {}).get("proposal_methods") or [{}]
    stated = [("num_speculative_tokens", raw.get("num_speculative_tokens")),
              ("speculators_config.proposal_methods[0].speculative_tokens", methods[0].get("speculative_tokens")),
              ("block_size", raw.get("block_size"))]
    return [(name, int(value)) for name, value in stated if value is not None]


def _drafts_per_step(raw: dict, source: str, chosen: int | None, repository: str | None) -> int | None:
    """The drafts per step, read as the module's docstring orders the fields (None: no field states them)."""
    nested = raw.get("dflash_config") or {}
    anchor = raw.get("sample_from_anchor", nested.get("sample_from_anchor"))
    if anchor is False:
        raise DraftValidationError(
            f"{source}: sample_from_anchor=false: the anchor is a bonus token and only the mask positions predict "
            f"(speculators' 1 + N block, vLLM's dspark_bonus_anchor); this suite runs DeepSpec's blocks, in which the "
            f"anchor's position predicts the first draft, so this draft cannot run here")
    stated = drafts_per_step_fields(raw)
    width = nested.get("block_size")
    readings = [] if width is None else [int(width)] if anchor else [int(width) - 1, int(width)]
    card = PUBLISHED_DRAFTS_PER_STEP.get(repository)
    if chosen is not None:
        used, name = int(chosen), "drafts_per_step (--drafts-per-step)"
    elif stated:
        name, used = stated[0]
    elif readings:
        name = "dflash_config.block_size"
        used = card if card in readings else readings[0]
        if len(readings) > 1:
            why = (f"to match the model card of {repository} ({card})" if card in readings else
                   "as z-lab's DFlash reads that field")
            meaning = "the anchor and the drafts" if used == readings[0] else "the drafts, as speculators' DSpark does"
            warnings.warn(f"{source}: only dflash_config.block_size={width} states the block: read as {meaning}, "
                          f"{used} drafts per step, {why}; pass --drafts-per-step N to choose", UserWarning,
                          stacklevel=4)
    else:
        return None
    others = [f"{other}={value}" for other, value in stated if value != used and other != name]
    if width is not None and name != "dflash_config.block_size" and int(width) not in (used, used + 1):
        others.append(f"dflash_config.block_size={width}")
    if others:
        verb = "disagrees" if len(others) == 1 else "disagree"
        warnings.warn(f"{source}: {', '.join(others)} {verb} with {name}={used}: using {used} drafts per step",
                      UserWarning, stacklevel=4)
    if chosen is None and card is not None and used != card:
        raise DraftValidationError(f"{source}: {name}={used} drafts per step, but the model card of {repository} "
                                   f"states {card}; pass --drafts-per-step N to run another count")
    return used


def _warn_about_rope(fields: dict, source: str) -> None:
    """One warning naming the rotary settings the draft does not apply (it follows DeepSpec's trainer: every
    dimension rotated with `rope_theta`)."""
    parameters = fields.get("rope_parameters") or fields.get("rope_scaling") or {}
    named = []
    factor = fields.get("partial_rotary_factor", parameters.get("partial_rotary_factor"))
    if factor is not None and float(factor) != 1.0:
        named.append(f"partial_rotary_factor={factor}")
    rope_type = parameters.get("rope_type", parameters.get("type"))
    if rope_type is not None and rope_type not in _APPLIED_ROPE_TYPES:
        named.append(f"rope_type={rope_type!r}")
    if named:
        warnings.warn(f"{source}: {', '.join(named)} is not applied: the draft rotates every dimension of head_dim "
                      f"with rope_theta, as DeepSpec trains it (transformers' Qwen3RotaryEmbedding, default type)",
                      UserWarning, stacklevel=3)
