"""The models folder: the shipped pair's IR is exported there once, and again when the pair or the exporter changes; the
real pair's download probes both repositories first (the hub mocked: no network)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from utils.models import default_ir_pair


def test_the_default_pair_is_exported_once_and_again_when_an_ir_format_changes(tmp_path, monkeypatch, fake_exporter):
    from utils.models import FRESH_EXPORT_VARIABLE

    monkeypatch.setenv(FRESH_EXPORT_VARIABLE, "1")  # the models folder's exports, not the shipped IR
    exported = fake_exporter
    target, draft = default_ir_pair(tmp_path)
    assert (target, draft) == (tmp_path / "tiny-ov" / "target", tmp_path / "tiny-ov" / "draft")
    assert exported == ["draft", "target"]
    default_ir_pair(tmp_path)
    assert exported == ["draft", "target"]  # up to date: nothing exported
    monkeypatch.setattr("utils.models.IR_FORMAT_VERSION", 10_000)  # an exporter writing another target layout
    default_ir_pair(tmp_path)
    assert exported == ["draft", "target", "target"]
    monkeypatch.setattr("utils.models.DRAFT_IR_FORMAT_VERSION", 10_000)  # and another draft layout
    default_ir_pair(tmp_path)
    assert exported == ["draft", "target", "target", "draft"]


def test_an_export_is_keyed_by_its_source_files_not_by_its_folder(tmp_path, monkeypatch):
    from utils.models import export_once

    exported = []

    def fake_export(source, out, **options):
        exported.append(options.get("weight_format"))
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "openvino_model.xml").write_text("<net/>")
        return Path(out)

    monkeypatch.setattr("utils.export.draft.export_draft", fake_export)
    source = tmp_path / "draft"
    source.mkdir()
    (source / "model.safetensors").write_bytes(b"weights of the first training")
    out = tmp_path / "ir"
    export_once("draft", source, out)
    export_once("draft", source, out)
    assert exported == ["fp32"], "the same files: exported once"
    (source / "model.safetensors").write_bytes(b"weights of a retrain")  # same folder, other files
    export_once("draft", source, out)
    export_once("draft", source, out, weight_format="int8")
    assert exported == ["fp32", "fp32", "int8"]
    with pytest.raises(ValueError, match="kind must be"):
        export_once("vision", source, out)


def test_a_notebook_prints_paths_relative_to_the_repository_or_the_models_folder(tmp_path, monkeypatch):
    from utils.models import REPO_ROOT, shown_path

    monkeypatch.setenv("DSPARK_OCR_MODELS", str(tmp_path / "models"))
    assert shown_path(REPO_ROOT / "utils" / "tiny" / "default" / "target") == "utils/tiny/default/target"
    assert shown_path(tmp_path / "models" / "tiny-ov" / "draft") == "<models>/tiny-ov/draft"
    assert shown_path(tmp_path / "elsewhere" / "scan.png") == ".../scan.png"
    monkeypatch.delenv("DSPARK_OCR_MODELS")
    assert shown_path(REPO_ROOT / "models" / "tiny-ov") == "<models>/tiny-ov", "the default models folder too"


def test_a_target_export_is_current_only_in_this_codes_ir_format(tmp_path):
    import json

    from utils.contract import IR_FORMAT_VERSION, LANGUAGE_MODEL_CONFIG
    from utils.models import current_target_export

    assert not current_target_export(tmp_path / "none")
    for version, current in ((IR_FORMAT_VERSION - 1, False), (IR_FORMAT_VERSION, True)):
        (tmp_path / LANGUAGE_MODEL_CONFIG).write_text(json.dumps({"format_version": version}))
        assert current_target_export(tmp_path) is current


def _hub_error(kind: type[Exception]) -> Exception:
    """An instance of a huggingface_hub error without the HTTP response its constructor wants."""
    error = kind.__new__(kind)
    Exception.__init__(error, f"{kind.__name__} (test)")
    return error


class _FakeHub:
    """`HfApi().model_info` and `snapshot_download` without a network: per repository, an error or files."""

    def __init__(self, answers: dict):
        self.answers, self.downloads = answers, []

    def model_info(self, repo_id, timeout=None):
        answer = self.answers[repo_id]
        if isinstance(answer, Exception):
            raise answer
        return SimpleNamespace(sha=f"sha-{repo_id}", siblings=[SimpleNamespace(rfilename=name) for name in answer])

    def snapshot_download(self, repo_id, *, local_dir, allow_patterns, revision):
        self.downloads.append((repo_id, revision, tuple(allow_patterns)))
        return str(local_dir)


@pytest.fixture
def fake_hub(monkeypatch):
    import huggingface_hub

    def install(answers):
        hub = _FakeHub(answers)
        monkeypatch.setattr(huggingface_hub, "HfApi", lambda: hub)
        monkeypatch.setattr(huggingface_hub, "snapshot_download", hub.snapshot_download)
        return hub
    return install


def test_both_repositories_are_probed_before_anything_is_fetched(fake_hub, tmp_path):
    from huggingface_hub.errors import GatedRepoError, OfflineModeIsEnabled, RepositoryNotFoundError

    from utils.models import REAL_DRAFT_ID, REAL_TARGET_ID, download_real_pair

    cases = [(_hub_error(GatedRepoError), "is gated"), (_hub_error(RepositoryNotFoundError), "does not exist"),
             (OfflineModeIsEnabled("offline (test)"), "offline mode is on"),
             (ConnectionError("no route to host"), "does not answer")]
    for error, said in cases:
        hub = fake_hub({REAL_TARGET_ID: ["config.json"], REAL_DRAFT_ID: error})
        with pytest.raises(RuntimeError) as raised:
            download_real_pair(tmp_path)
        lines = str(raised.value).splitlines()[1:]
        assert len(lines) == 1 and REAL_DRAFT_ID in lines[0] and said in lines[0], lines
        assert hub.downloads == []  # the target was not fetched either
    hub = fake_hub({REAL_TARGET_ID: _hub_error(RepositoryNotFoundError), REAL_DRAFT_ID: _hub_error(GatedRepoError)})
    with pytest.raises(RuntimeError) as raised:
        download_real_pair(tmp_path)
    assert len(str(raised.value).splitlines()) == 3  # one line per failing repository


def test_the_files_fetched_are_listed_and_pickles_are_not_among_them(fake_hub, tmp_path):
    from utils.models import REAL_DRAFT_ID, REAL_TARGET_ID, download_real_pair

    hub = fake_hub({REAL_TARGET_ID: ["config.json", "model.safetensors", "pytorch_model.bin", "chat_template.jinja"],
                    REAL_DRAFT_ID: ["config.json", "model.safetensors", "local-to-target.json", "README.md"]})
    printed = []
    target, draft = download_real_pair(tmp_path, report=printed.append)
    assert (target, draft) == (tmp_path / "MiniCPM-OCR-1.0", tmp_path / "MiniCPM-OCR-1.0-DSpark")
    assert [(repo, revision) for repo, revision, _ in hub.downloads] == [
        (REAL_TARGET_ID, f"sha-{REAL_TARGET_ID}"), (REAL_DRAFT_ID, f"sha-{REAL_DRAFT_ID}")]  # what was probed
    assert printed == [
        f"{REAL_TARGET_ID} -> {target}: 3 files: chat_template.jinja, config.json, model.safetensors",
        f"{REAL_DRAFT_ID} -> {draft}: 3 files: config.json, local-to-target.json, model.safetensors"]
