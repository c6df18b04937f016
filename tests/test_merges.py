"""A reader in the real pair's regime: the shipped reader of one token per character, grown to a tokenizer with
merges and taught to write merged tokens of rows without their trailing spaces (`python -m utils.tiny --merges`)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from utils.pages.reading_pages import MERGING_KINDS, reading_pages
from utils.tiny import SHIPPED_PAIR_DIR, ReaderConfig, TinyPairConfig, build_tiny_pair
from utils.tiny.__main__ import main as tiny_cli
from utils.tiny.config import MERGING_DISTILL, MERGING_PAIR, MERGING_READ, READING_PAIR, DistillConfig
from utils.tiny.pair import character_reader, shipped_recipe
from utils.tiny.reader import FirstPhase, grow_vocabulary, train_merges, trimmed
from utils.tiny.tokenizer import BYTE_VOCABULARY

MERGING = TinyPairConfig(**READING_PAIR | MERGING_PAIR)


@pytest.fixture(scope="module")
def random_merging_pair(tmp_path_factory):
    """A random pair of the merging sizes: its target is what the shipped reader grows into."""
    return build_tiny_pair(tmp_path_factory.mktemp("merging") / "pair", MERGING)


def test_the_merging_sizes_are_the_real_pair_s_regime_scaled_down():
    """Merges, a draft of about half the vocabulary and at least 4 x 64 tokens (a Top-64 walk approximates the dense
    one), 15 drafts a block; the draft distils on the pages the reader learnt the merges on."""
    assert MERGING.tokenizer_vocab_size > BYTE_VOCABULARY and MERGING.block_size == 15
    assert 4 * 64 <= MERGING.draft_vocab_size <= MERGING.tokenizer_vocab_size // 2 + 1
    assert DistillConfig(**MERGING_DISTILL).options()["page_kinds"] == list(MERGING_KINDS)
    assert "page_kinds" not in DistillConfig().options()  # drafts distilled before the option record none
    assert not any(key.startswith("merge_") for key in ReaderConfig().options())  # nor readers without merges
    merging = ReaderConfig(**MERGING_READ)
    assert merging.options()["merge_steps"] == MERGING_READ["merge_steps"]
    assert merging.character_reader_options() == ReaderConfig().options()
    assert merging.options()["merge_alignment"] == "slots"  # a checkpoint of merges aligned otherwise is refused
    with pytest.raises(ValueError, match="merge_alignment='rows': choose one of slots, cells"):
        ReaderConfig(merge_alignment="rows")


def test_a_page_s_trimmed_text_is_what_a_reader_of_unpadded_rows_writes():
    page = reading_pages(1, seed=0, sparse_share=1.0)[0]
    rows = trimmed(page).text.split("\n")
    assert all(row == row.rstrip() for row in rows) and rows[-1].strip()
    assert [row.rstrip() for row in page.text.split("\n")][:len(rows)] == rows


def test_the_shipped_reader_is_checked_as_the_reader_a_merging_pair_grows_from(tmp_path):
    """The shipped pair's target is the reader of one token per character the merges start from (the draft's sizes
    do not matter); a reader trained otherwise, or with other target sizes, is refused naming what differs."""
    read = ReaderConfig(**MERGING_READ)
    start = character_reader(SHIPPED_PAIR_DIR, MERGING, read)
    assert start.target == SHIPPED_PAIR_DIR / "target" and start.report["examples"] > 0
    with pytest.raises(ValueError, match="steps"):
        character_reader(SHIPPED_PAIR_DIR, MERGING, ReaderConfig(steps=5, **MERGING_READ))
    with pytest.raises(ValueError, match="hidden_size"):
        character_reader(SHIPPED_PAIR_DIR, TinyPairConfig(**READING_PAIR | MERGING_PAIR | {"hidden_size": 96}), read)
    with pytest.raises(ValueError, match="refined already"):
        character_reader(SHIPPED_PAIR_DIR, MERGING, ReaderConfig(refine_steps=0, **MERGING_READ))
    with pytest.raises(ValueError, match="a reader learns merges only with a tokenizer that has some"):
        build_tiny_pair(tmp_path / "bytes", shipped_recipe()["config"], read=read)


def test_the_command_refuses_merges_without_reading(tmp_path, capsys):
    for argv in (["--merges"], ["--read", "--merge-steps", "5"]):
        with pytest.raises(SystemExit) as refused:
            tiny_cli(["--out", str(tmp_path / "cli"), *argv])
        assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "--merges needs --read" in err and "--merge-steps needs --merges" in err
    assert not (tmp_path / "cli").exists()


def test_a_grown_reader_keeps_every_weight_and_starts_each_merge_at_its_first_byte(random_merging_pair, tmp_path):
    """Fed the same ids, the grown reader computes what the shipped one did (the bytes keep their ids and rows), and
    each merged token's row is its first byte's within the noise that tells them apart."""
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    grown = tmp_path / "grown"
    shutil.copytree(random_merging_pair.target, grown)
    grow_vocabulary(SHIPPED_PAIR_DIR / "target", grown)
    reader = AutoModelForImageTextToText.from_pretrained(SHIPPED_PAIR_DIR / "target").eval()
    model = AutoModelForImageTextToText.from_pretrained(grown).eval()
    ids = torch.tensor([[BYTE_VOCABULARY - 1 - i for i in range(12)] + list(range(40, 80))])
    with torch.no_grad():
        before = reader(input_ids=ids).logits[..., :BYTE_VOCABULARY]
        after = model(input_ids=ids).logits[..., :BYTE_VOCABULARY]
    assert torch.allclose(before, after, atol=1e-5)
    tokenizer = AutoTokenizer.from_pretrained(grown)
    table = model.get_input_embeddings().weight
    assert torch.equal(model.get_output_embeddings().weight, table)  # still tied
    for merge in (BYTE_VOCABULARY, len(tokenizer) - 1):  # the first merge learnt and the last
        piece = tokenizer.convert_ids_to_tokens(merge)
        first = tokenizer.convert_tokens_to_ids(piece[0])
        assert len(piece) > 1 and first < BYTE_VOCABULARY and 0 < (table[merge] - table[first]).abs().max() < 0.06
    assert not table[len(tokenizer):].any()
    with pytest.raises(ValueError, match="does not start with the .* tokens of the reader"):
        grow_vocabulary(grown, SHIPPED_PAIR_DIR / "target")


@pytest.mark.slow
def test_the_merges_train_the_grown_reader_and_continue_the_reading_s_curve(random_merging_pair, tmp_path):
    """A few steps of the merges: the grown reader is saved in the target, its report continues the character
    reader's curve and time, and its held-out pages are scored against their trimmed texts."""
    target = tmp_path / "target"
    shutil.copytree(random_merging_pair.target, target)
    start = FirstPhase(SHIPPED_PAIR_DIR / "target",
                       json.loads((SHIPPED_PAIR_DIR / "manifest.json").read_text())["training"]["reading"])
    config = ReaderConfig(merge_steps=2, held_out_pages=1)
    report = train_merges(target, start, config)
    assert report.examples == start.report["examples"] + 2 * config.examples_per_step
    assert [list(point) for point in report.curve[:len(start.report["curve"]) - 1]] == start.report["curve"][:-1]
    assert report.train_seconds > start.report["train_seconds"] and report.first_loss == start.report["first_loss"]
    assert {"prose", "look-alikes", "layout", "made-up-words"} <= set(report.held_out.cer_by_kind)
    from safetensors.torch import load_file

    weights = load_file(target / "model.safetensors")
    assert weights["model.language_model.embed_tokens.weight"].shape[0] == MERGING.vocab_size


def test_the_letters_pre_tokenizer_merges_inside_words_only_and_keeps_the_byte_ids():
    """Every digit and every space a token of its own, merges inside runs of letters and of punctuation; its first
    ids are the one-token-per-character tokenizer's, so a reader of characters grows into it; an unknown
    pre-tokenizer is refused by name."""
    from utils.tiny.tokenizer import train_tokenizer

    letters, gpt2 = train_tokenizer(512, pre_tokenizer="letters"), train_tokenizer(512)
    text = "Total    12.50\n  the cat"
    pieces = letters.tokenize(text)
    assert letters.decode(letters(text, add_special_tokens=False).input_ids) == text
    assert pieces.count("Ġ") == text.count(" ")
    assert all(piece in ("1", "2", "5", "0") for piece in pieces if piece.isdigit())
    assert any(len(piece) > 1 and piece.isalpha() for piece in pieces)
    assert any(len(piece) > 1 and set(piece) == {"Ġ"} for piece in gpt2.tokenize(text))  # GPT-2's merges spaces
    byte = train_tokenizer(BYTE_VOCABULARY)
    ids = list(range(BYTE_VOCABULARY))
    assert letters.convert_ids_to_tokens(ids) == byte.convert_ids_to_tokens(ids)
    with pytest.raises(ValueError, match="pre_tokenizer='bpe'"):
        train_tokenizer(512, pre_tokenizer="bpe")
    with pytest.raises(ValueError, match="pre_tokenizer"):
        TinyPairConfig(pre_tokenizer="bpe")
    assert "pre_tokenizer" not in TinyPairConfig().options()  # pairs built before the option record none
    assert TinyPairConfig(pre_tokenizer="letters").options()["pre_tokenizer"] == "letters"


def test_the_letters_tokenizer_converts_to_openvino_as_it_splits_text(random_merging_pair, tmp_path):
    """The runtime reads prompts and writes answers with the converted tokenizer: on held-out pages, the pages
    written by hand and laid out by hand, runs of spaces, digits and non-ASCII text, it encodes and decodes as the
    Hugging Face tokenizer does."""
    import openvino_genai as ov_genai
    from transformers import AutoTokenizer

    from utils.export.tokenizer import export_tokenizer
    from utils.pages.written_pages import LAYOUT_TEXTS, written_pages

    export_tokenizer(random_merging_pair.target, tmp_path)
    hf_tokenizer = AutoTokenizer.from_pretrained(random_merging_pair.target)
    ov_tokenizer = ov_genai.Tokenizer(str(tmp_path))
    texts = ["Text Recognition:", "  three\n    four  five", "eggs x12 ........ 3.49",
             "naïve café, 東京 €1.234,56",
             *(page.text for page in reading_pages(6, seed=0, split="held-out")),
             *(page.text for page in written_pages()), *(page.text for page in written_pages(LAYOUT_TEXTS))]
    for text in texts:
        ids = hf_tokenizer(text)["input_ids"]
        assert ov_tokenizer.encode(text).input_ids.data[0].tolist() == ids, text
        assert ov_tokenizer.decode(ids) == hf_tokenizer.decode(ids) == text
