"""A real byte-level BPE tokenizer for the tiny target, trained offline on text shipped with the suite."""

from __future__ import annotations

from pathlib import Path

from utils.pages.samples import CORPUS_PATH

__all__ = ["PRE_TOKENIZERS", "SPECIAL_TOKENS", "BYTE_VOCABULARY", "MULTIMODAL_TOKENS", "EOS_TOKEN", "PAD_TOKEN",
           "MASK_TOKEN", "CHAT_TEMPLATE", "train_tokenizer"]


EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
MASK_TOKEN = "<|mask|>"

# Named special tokens the MiniCPM-OCR processor reads from the tokenizer (`tokenizer.image_token`, ...).
MULTIMODAL_TOKENS = {
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "image_start_token": "<image>",
    "image_end_token": "</image>",
    "slice_start_token": "<slice>",
    "slice_end_token": "</slice>",
    "image_id_start_token": "<image_id>",
    "image_id_end_token": "</image_id>",
}

SPECIAL_TOKENS = [PAD_TOKEN, "<|im_start|>", EOS_TOKEN, "<think>", "</think>", MASK_TOKEN,
                  *MULTIMODAL_TOKENS.values()]
BYTE_VOCABULARY = 256 + len(SPECIAL_TOKENS)  # a byte-level BPE this size learns no merge: one token per byte

# Qwen-style chat turns; an image item becomes one image placeholder, which the processor expands.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<|image_pad|>{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# How text is split before merges are learnt (`TinyPairConfig.pre_tokenizer`): "gpt2", GPT-2's pattern (a word with
# the space before it, runs of digits, runs of spaces), or "letters": merges only inside runs of letters and of
# punctuation, every digit and every space a token of its own, as Qwen keeps its digits. A reader of rows without their
# padding then counts blank cells one token at a time, as it reads digits.
PRE_TOKENIZERS = ("gpt2", "letters")
_LETTERS = r"\p{L}+|\p{N}|[^\s\p{L}\p{N}]+|\s"


def train_tokenizer(vocab_size: int, *, corpus_path: Path = CORPUS_PATH, pre_tokenizer: str = "gpt2"):
    """Trains a byte-level BPE on the shipped corpus and wraps it as a transformers tokenizer.

    Args:
        vocab_size: size of the trained vocabulary, special tokens included.
        corpus_path: the text to learn merges from.
        pre_tokenizer: how text is split before merging (`PRE_TOKENIZERS`).

    Returns:
        A `transformers.TokenizersBackend` with the chat template, EOS/pad and the multimodal special tokens.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import TokenizersBackend

    if pre_tokenizer not in PRE_TOKENIZERS:
        raise ValueError(f"pre_tokenizer={pre_tokenizer!r}: choose one of {', '.join(PRE_TOKENIZERS)}")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = (pre_tokenizers.ByteLevel(add_prefix_space=False) if pre_tokenizer == "gpt2" else
                         pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(_LETTERS), behavior="isolated"),
                                                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]))
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus_path.read_text(encoding="utf-8").splitlines(keepends=True), trainer)
    return TokenizersBackend(
        tokenizer_object=bpe,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        extra_special_tokens=dict(MULTIMODAL_TOKENS),
        chat_template=CHAT_TEMPLATE,
    )
