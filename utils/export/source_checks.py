"""What a target's `config.json` may hold for the language-model export to be exact, checked before any conversion.

The export re-states the text layers on their own weights (`utils.export.language_model`), so a value it does not
re-state would not fail: it would give other numbers. Each check here names the file, the field, the value and
what is supported, in one line.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SUPPORTED_LAYER_TYPES", "STATIC_ROPE_TYPES", "check_text_config"]

SUPPORTED_LAYER_TYPES = ("linear_attention", "full_attention")  # Gated DeltaNet and gated attention
# Rope types whose frequencies transformers computes once (the export reads `inv_freq` and `attention_scaling`);
# "dynamic" and "longrope" change them with the sequence length, which one traced graph cannot follow.
STATIC_ROPE_TYPES = ("default", "linear", "yarn", "llama3")


def check_text_config(config: dict, *, source: Path) -> None:
    """Raises ValueError when the target's text config holds a value the language-model export cannot represent.

    Args:
        config: the parsed `config.json` of a MiniCPM-OCR folder.
        source: its path, for the message.
    """
    text = config.get("text_config")
    if not isinstance(text, dict):
        raise ValueError(f"{source}: text_config is missing or not an object; a MiniCPM-OCR config.json nests the "
                         "Qwen3.5 text model's settings there")
    unknown = sorted({kind for kind in text.get("layer_types") or [] if kind not in SUPPORTED_LAYER_TYPES})
    if unknown:
        raise ValueError(f"{source}: text_config.layer_types holds {unknown}; supported: "
                         f"{', '.join(SUPPORTED_LAYER_TYPES)}")
    rope = text.get("rope_parameters") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in STATIC_ROPE_TYPES:
        raise ValueError(f"{source}: text_config.rope_parameters.rope_type={rope_type!r} is not supported (its "
                         f"frequencies depend on the sequence length); supported: {', '.join(STATIC_ROPE_TYPES)}")
