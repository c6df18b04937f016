"""The manifest of a shipped tiny pair: its file hashes, how it was built, and how well it teaches.

Float training is not bit-reproducible across CPUs (other SIMD paths round differently), so a pair trained
on first use would differ from machine to machine, and so would every notebook output computed from it. The
suite therefore ships its default pair as files and checks them against this manifest. Retraining with the
same command gives a pair of the same quality, not the same bits.

`manifest.json` holds:
- `build`: the build stamp (`tiny-pair.json`): sizes, seed, how the target and the draft were trained;
- `command`: the command that rebuilds a pair of this kind;
- `built_with`: the versions that trained it (for information: another version trains other bits);
- `files`: the SHA-256 of every file below `target/` and `draft/`;
- `training`: what the build measured while it trained (the reader's learning curve, CER and time), if given;
- `held_out`: the figures of `measure_acceptance` (PyTorch reference) on the sample pages, per Markov computation,
  with the prompts the draft was distilled for;
- `reading`, for a pair whose target was trained to read: the figures of `measure_reading` (OpenVINO, as the CLI
  runs it) on held-out generated pages;
- `confidence`, for such a pair: how well the confidence head ranks rejected drafts at every anchor of the target's
  answers to the held-out generated and random pages (`confidence_figures`): a draft hardly ever rejected leaves
  the readings' AUCs resting on a rejection or two.
"""

from __future__ import annotations

import json
from pathlib import Path

from utils.pages.typewriter import PAGE_CELLS
from utils.files import sha256_file
from utils.tiny.config import BUILD_STAMP

__all__ = ["MANIFEST", "held_out_max_new_tokens", "HELD_OUT_WALKS", "REBUILD_COMMAND", "pair_files",
           "held_out_figures", "confidence_figures", "write_manifest", "read_manifest", "verify_pair_files"]

MANIFEST = "manifest.json"
REBUILD_COMMAND = "python -m utils.tiny --out DIR --read --distill --manifest"  # the shipped recipe
_PARTS = ("target", "draft")
HELD_OUT_WALKS = {"top_k_scorer": 64, "dense_walk": 0}  # the manifest's name -> markov_head_top_k


def held_out_max_new_tokens(stamp: dict) -> int:
    """The answer budget per held-out (page, prompt) case: a whole page for a reader (its text and EOS), else 64."""
    return PAGE_CELLS if "read" in stamp else 64


def pair_files(root: Path | str) -> list[str]:
    """The files of a pair below `target/` and `draft/`, as sorted POSIX paths relative to `root`."""
    root = Path(root)
    return sorted(path.relative_to(root).as_posix() for part in _PARTS
                  for path in (root / part).rglob("*") if path.is_file())


def _versions() -> dict:
    from importlib.metadata import version

    return {name: version(name) for name in ("torch", "transformers", "tokenizers")}


def held_out_figures(root: Path, stamp: dict) -> dict:
    """`measure_acceptance` (PyTorch reference) on the sample pages, per Markov computation, asked with the
    prompts the draft was distilled for (a reading pair's draft learns the default prompt's offset only)."""
    from tqdm.auto import tqdm

    from utils.pages.samples import SAMPLE_PROMPTS
    from utils.tiny.acceptance import measure_acceptance

    budget, prompts = held_out_max_new_tokens(stamp), stamp.get("distill", {}).get("prompts", list(SAMPLE_PROMPTS))
    figures = {"num_assistant_tokens": stamp["block_size"], "max_new_tokens": budget, "prompts": prompts}
    for name, top_k in tqdm(HELD_OUT_WALKS.items(), desc="measuring on held-out pages"):
        report = measure_acceptance(root / "target", root / "draft", prompts=prompts, markov_head_top_k=top_k,
                                    max_new_tokens=budget)
        figures[name] = report.as_dict()
    return figures


def confidence_figures(root: Path, stamp: dict) -> dict:
    """`rank_confidence` (PyTorch reference) on the target's answers to the held-out pages `measure_reading` reads
    first (the generated pages, then those of random printable ASCII), asked with the prompts the draft learnt."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from utils.pages.samples import SAMPLE_PROMPTS
    from utils.reference.modeling import load_reference_draft
    from utils.tiny.confidence import rank_confidence
    from utils.tiny.distill_data import collect_sequences
    from utils.tiny.reading_report import held_out_pages

    generated, random = held_out_pages()
    pages = [*generated, *random]
    prompts = stamp.get("distill", {}).get("prompts", list(SAMPLE_PROMPTS))
    target = AutoModelForImageTextToText.from_pretrained(root / "target").eval()
    draft = load_reference_draft(root / "draft").eval()
    sequences = collect_sequences(target, AutoProcessor.from_pretrained(root / "target"),
                                  [(page.image, prompt) for page in pages for prompt in prompts],
                                  hidden_layer_ids=draft.config.target_layer_ids,
                                  max_new_tokens=held_out_max_new_tokens(stamp))
    return {"pages": len(pages), "prompts": prompts} | rank_confidence(draft, target.get_input_embeddings(), sequences)


def write_manifest(root: Path | str, *, training: dict | None = None) -> dict:
    """Measures a built pair on held-out pages and writes `root/manifest.json`.

    Args:
        root: the pair's folder (`target/`, `draft/` and the build stamp `tiny-pair.json`).
        training: what the build measured while training (for example `{"reading": ReaderReport.as_dict()}`).

    Returns:
        The manifest.
    """
    from utils.tiny.reading_report import measure_reading

    root = Path(root)
    stamp = json.loads((root / BUILD_STAMP).read_text())
    manifest = {"build": stamp, "command": REBUILD_COMMAND, "built_with": _versions(),
                "files": {name: sha256_file(root / name) for name in pair_files(root)}}
    manifest |= {"training": training} if training else {}
    manifest |= {"held_out": held_out_figures(root, stamp)}
    if "read" in stamp:
        manifest |= {"reading": measure_reading(root), "confidence": confidence_figures(root, stamp)}
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_manifest(root: Path | str) -> dict:
    """The manifest of the pair in `root`; a clear error when there is none."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: {root} is not a shipped pair (rebuild: {REBUILD_COMMAND})")
    return json.loads(path.read_text())


def verify_pair_files(root: Path | str) -> dict:
    """Checks every file of the pair against the manifest's hashes and returns the manifest.

    Raises:
        ValueError: naming each file that is missing, unexpected or changed (a Git LFS pointer, a partial
            checkout, a local retrain written over the shipped files).
    """
    root = Path(root)
    manifest = read_manifest(root)
    expected, present = manifest["files"], set(pair_files(root))
    problems = [f"{name} is missing" for name in sorted(set(expected) - present)]
    problems += [f"{name} is not in the manifest" for name in sorted(present - set(expected))]
    problems += [f"{name} differs from the manifest (sha256)" for name in sorted(present & set(expected))
                 if sha256_file(root / name) != expected[name]]
    if problems:
        raise ValueError(f"the tiny pair in {root} does not match its {MANIFEST}: " + "; ".join(problems)
                         + f". Restore it with `git checkout -- {root}` or rebuild it with {REBUILD_COMMAND}")
    return manifest
