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

from utils.contract.processor import MultimodalTokens, TargetProcessor, read_target_processor

__all__ = ["DEFAULT_PROMPT", "NON_THINKING", "ChatPromptBuilder"]

DEFAULT_PROMPT = "Text Recognition:"  # MiniCPM-OCR's own instruction; the one definition of the suite
NON_THINKING = {"enable_thinking": False}  # applied to templates that mention the switch


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
    def from_processor(cls, processor: TargetProcessor, *, template_kwargs: dict | None = None) -> ChatPromptBuilder:
        """The builder of a folder's processor files, read once (`utils.contract.processor.read_target_processor`).

        Args:
            processor: the template, tokens, `use_image_id` and special tokens of a MiniCPM-OCR folder.
            template_kwargs: extra chat-template arguments (e.g. `{"enable_thinking": True}`).
        """
        return cls(processor.chat_template, tokens=processor.tokens,
                   use_image_id=processor.image_processor.use_image_id, special_tokens=processor.special_tokens,
                   template_kwargs=template_kwargs)

    @classmethod
    def from_pretrained(cls, folder: Path | str, *, template_kwargs: dict | None = None) -> ChatPromptBuilder:
        """Reads the chat template, tokens and `use_image_id` from a model folder (`from_processor`)."""
        return cls.from_processor(read_target_processor(folder), template_kwargs=template_kwargs)

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
