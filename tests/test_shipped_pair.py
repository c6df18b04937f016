"""The default pair ships as files: it matches its manifest, the default recipe, and teaches something."""

from __future__ import annotations

import json
import shutil

import pytest

from utils.tiny import BUILD_STAMP, SHIPPED_PAIR_DIR, DistillConfig, PretrainConfig, TinyPairConfig, default_pair
from utils.tiny.acceptance import measure_acceptance
from utils.tiny.manifest import HELD_OUT_MAX_NEW_TOKENS, MANIFEST, pair_files, read_manifest
from utils.tiny.manifest import HELD_OUT_WALKS as WALKS
from utils.tiny.pair import build_stamp


@pytest.fixture(scope="module")
def manifest():
    return read_manifest(SHIPPED_PAIR_DIR)


def test_default_pair_is_the_shipped_pair_built_by_the_default_recipe(manifest):
    pair = default_pair()
    assert pair.root == SHIPPED_PAIR_DIR
    assert (pair.config, pair.pretrain, pair.distill) == (TinyPairConfig(), PretrainConfig(), DistillConfig())
    recipe = build_stamp(TinyPairConfig(), pretrain=PretrainConfig(), distill=DistillConfig())
    assert manifest["build"] == recipe == json.loads((SHIPPED_PAIR_DIR / BUILD_STAMP).read_text()), \
        "the defaults changed: rebuild the shipped pair with " + manifest["command"]
    assert set(manifest["files"]) == set(pair_files(SHIPPED_PAIR_DIR))


@pytest.mark.parametrize("walk", WALKS)
def test_shipped_pair_is_a_good_teacher_on_held_out_pages(manifest, walk):
    """What the manifest records: tokens per step in [3, 6] at K = 8, real rejections, answers of varying
    length that end with EOS, a confidence head that ranks (AUC above 0.7)."""
    figures = manifest["held_out"][walk]
    assert manifest["held_out"]["num_assistant_tokens"] == 8
    assert 3.0 <= figures["tokens_per_step"] <= 6.0
    assert figures["rejected_share"] >= 0.05 and figures["rejected_positions"] >= 20
    assert figures["answers_ending_with_eos"] == figures["answers"] == 20
    assert len(set(figures["answer_lengths"])) >= 4 and figures["distinct_answers"] >= 4
    assert figures["confidence_auc"] > 0.7


@pytest.mark.parametrize("walk", WALKS)
def test_manifest_figures_hold_when_measured_again(manifest, walk):
    """Inference only (no training), so the figures come back; a near-tie may move a token on another CPU,
    hence the tolerance instead of equality."""
    figures = manifest["held_out"][walk]
    report = measure_acceptance(SHIPPED_PAIR_DIR / "target", SHIPPED_PAIR_DIR / "draft",
                                markov_head_top_k=WALKS[walk], max_new_tokens=HELD_OUT_MAX_NEW_TOKENS)
    assert report.tokens_per_step == pytest.approx(figures["tokens_per_step"], abs=0.25)
    assert report.confidence_auc == pytest.approx(figures["confidence_auc"], abs=0.05)
    assert report.answers_ending_with_eos == figures["answers_ending_with_eos"]


@pytest.mark.parametrize("damage, message", [
    (lambda root: (root / "draft" / "model.safetensors").write_bytes(b"version https://git-lfs"),
     "draft/model.safetensors differs"),
    (lambda root: (root / "target" / "tokenizer.json").unlink(), "target/tokenizer.json is missing"),
    (lambda root: (root / "draft" / "notes.txt").write_text("x"), "draft/notes.txt is not in the manifest"),
    (lambda root: (root / MANIFEST).unlink(), "manifest.json is missing"),
])
def test_a_damaged_shipped_pair_is_refused_with_the_file_named(tmp_path, damage, message):
    root = tmp_path / "default"
    shutil.copytree(SHIPPED_PAIR_DIR, root)
    default_pair(root)
    damage(root)
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        default_pair(root)
