"""The chat prompt of an OCR request, rendered and expanded as `MiniCPMOcrProcessor` does, without transformers.

The chat template (jinja) comes from the model folder; it writes one image token per image, and each of them is
replaced, in order, by `<image_id>i</image_id>` (when the processor uses image ids) and the image's placeholder.

Qwen3.5-family templates have an `enable_thinking` switch that defaults to thinking; MiniCPM-OCR's serving
recipe renders them with `enable_thinking: false`, so an OCR answer starts with the text, not with reasoning.
The builder does the same whenever the template has the switch (`NON_THINKING`); any template argument can
be passed through.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .config import MultimodalTokens, load_image_processor_config, load_multimodal_tokens, read_json

__all__ = ["DEFAULT_PROMPT", "NON_THINKING", "ChatPromptBuilder", "load_chat_template"]

DEFAULT_PROMPT = "Text Recognition:"  # MiniCPM-OCR's own instruction; the one definition of the suite
NON_THINKING = {"enable_thinking": False}  # applied to templates that mention the switch
_SPECIAL_TOKEN_FIELDS = ("bos_token", "eos_token", "pad_token", "unk_token")


def _template_text(value: object, *, source: Path) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {entry.get("name"): entry.get("template") for entry in value if isinstance(entry, dict)}
        if isinstance(named.get("default"), str):
            return named["default"]
    raise ValueError(f"{source}: 'chat_template' must be a string or a list with a 'default' template")


def load_chat_template(folder: Path | str) -> str:
    """The chat template of a model folder: chat_template.jinja, chat_template.json or tokenizer_config.json.

    Args:
        folder: a model folder.

    Returns:
        The jinja source.
    """
    folder = Path(folder)
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    for name in ("chat_template.json", "tokenizer_config.json"):
        path = folder / name
        if path.is_file() and "chat_template" in (config := read_json(path)):
            return _template_text(config["chat_template"], source=path)
    raise ValueError(f"{folder} has no chat template (chat_template.jinja, chat_template.json or "
                     "'chat_template' in tokenizer_config.json)")


def _raise_exception(message: str) -> None:
    raise ValueError(f"chat template error: {message}")


def _compile(template: str):
    """Compiles a chat template in the sandboxed jinja environment transformers uses."""
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    environment.filters["tojson"] = lambda value, indent=None: json.dumps(value, indent=indent, ensure_ascii=False)
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = lambda format: datetime.now().strftime(format)
    return environment.from_string(template)


class ChatPromptBuilder:
    """Builds the full prompt text of a request: chat turns with each image expanded to its placeholder."""

    def __init__(self, template: str, *, tokens: MultimodalTokens, use_image_id: bool,
                 special_tokens: dict[str, str], template_kwargs: dict | None = None) -> None:
        """
        Args:
            template: the jinja source.
            tokens: the multimodal special tokens.
            use_image_id: write `<image_id>i</image_id>` before each image.
            special_tokens: bos/eos/pad/unk token strings the template may use.
            template_kwargs: extra template arguments, over `NON_THINKING` when the template has that switch.
        """
        self.template = _compile(template)
        self.tokens = tokens
        self.use_image_id = use_image_id
        self.special_tokens = special_tokens
        self.template_kwargs = (NON_THINKING if "enable_thinking" in template else {}) | (template_kwargs or {})

    @classmethod
    def from_pretrained(cls, folder: Path | str, *, template_kwargs: dict | None = None) -> ChatPromptBuilder:
        """Reads the chat template, tokens and `use_image_id` from a model folder.

        Args:
            folder: a MiniCPM-OCR model folder.
            template_kwargs: extra chat-template arguments (e.g. `{"enable_thinking": True}`).
        """
        tokenizer_config = read_json(Path(folder) / "tokenizer_config.json")
        special_tokens = {name: value for name in _SPECIAL_TOKEN_FIELDS
                          if isinstance(value := tokenizer_config.get(name), str)}
        return cls(load_chat_template(folder), tokens=load_multimodal_tokens(folder),
                   use_image_id=load_image_processor_config(folder).use_image_id, special_tokens=special_tokens,
                   template_kwargs=template_kwargs)

    def __call__(self, placeholders: list[str], *, prompt: str = DEFAULT_PROMPT) -> str:
        """A user turn with the images then `prompt`, followed by the assistant's generation prompt.

        Args:
            placeholders: `PreprocessedImage.placeholder` of each image, in order.
            prompt: the instruction after the images.

        Returns:
            The text to tokenize; its image tokens line up with the vision features of the images in order.
        """
        content = [{"type": "image"} for _ in placeholders] + [{"type": "text", "text": prompt}]
        text = self.template.render(messages=[{"role": "user", "content": content}], add_generation_prompt=True,
                                    tools=None, documents=None, **self.special_tokens, **self.template_kwargs)
        pieces = text.split(self.tokens.image_token)
        if len(pieces) - 1 != len(placeholders):
            raise ValueError(f"the chat template wrote {len(pieces) - 1} image tokens "
                             f"({self.tokens.image_token!r}) for {len(placeholders)} images")
        expanded = [pieces[0]]
        for index, (placeholder, piece) in enumerate(zip(placeholders, pieces[1:])):
            expanded += [self._image_id(index), placeholder, piece]
        return "".join(expanded)

    def _image_id(self, index: int) -> str:
        if not self.use_image_id:
            return ""
        return f"{self.tokens.image_id_start_token}{index}{self.tokens.image_id_end_token}"
