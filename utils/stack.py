"""What is installed, which devices OpenVINO sees, and which path (upstream or ours) the suite takes.

The upstream path is chosen by probing what the installed packages can do, never by guessing from versions:
optimum-intel must know how to export `minicpm_ocr` targets and pruned-vocabulary DSpark drafts, and
OpenVINO GenAI must take a draft with a Markov head.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path

__all__ = ["REQUIREMENTS", "installed_versions", "torch_build", "installed_size", "install_report", "list_devices",
           "has_intel_gpu", "default_device", "UpstreamSupport", "probe_upstream"]

REQUIREMENTS = Path(__file__).resolve().parent.parent / "requirements.txt"


def _requirement_lines(path: Path) -> list[tuple[str, str]]:
    pairs = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            name, spec = re.match(r"([A-Za-z0-9_.\-\[\]]+)\s*(.*)", line).groups()
            pairs.append((name, spec))
    return pairs


def installed_versions(requirements: Path = REQUIREMENTS) -> list[dict]:
    """One row per requirement: package, required specifier, installed version (or None)."""
    rows = []
    for name, spec in _requirement_lines(requirements):
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = None
        rows.append({"package": name, "required": spec or "any", "installed": version})
    return rows


def torch_build() -> str | None:
    """The installed torch's build, "cpu" or "cuda 13.0" (or "rocm ..."); None without torch. Imports torch."""
    try:
        import torch
    except ImportError:
        return None
    if torch.version.cuda:
        return f"cuda {torch.version.cuda}"
    hip = getattr(torch.version, "hip", None)
    return f"rocm {hip}" if hip else "cpu"


def _tree_size(folder: Path) -> int:
    return sum(entry.stat(follow_symlinks=False).st_size if entry.is_file(follow_symlinks=False) else
               _tree_size(Path(entry.path)) if entry.is_dir(follow_symlinks=False) else 0
               for entry in os.scandir(folder))


def installed_size() -> dict[str, int]:
    """Bytes installed in this interpreter's site-packages: in all, and in GPU runtime wheels (nvidia-*, triton)."""
    folders = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
    total = gpu = 0
    for folder in filter(Path.is_dir, folders):
        for entry in os.scandir(folder):
            size = _tree_size(Path(entry.path)) if entry.is_dir(follow_symlinks=False) else entry.stat().st_size
            total += size
            gpu += size if entry.name.lower().startswith(("nvidia", "triton")) else 0
    return {"site_packages": total, "nvidia_and_triton": gpu}


def install_report() -> str:
    """One line on what the install weighs and which torch build it holds (`.ci/run` prints it)."""
    size, build = installed_size(), torch_build()
    try:
        torch = f"torch {importlib.metadata.version('torch')}, {build} build"
    except importlib.metadata.PackageNotFoundError:
        torch = "no torch"
    return (f"site-packages: {size['site_packages'] / 1e9:.1f} GB, of which nvidia and triton wheels "
            f"{size['nvidia_and_triton'] / 1e9:.1f} GB; {torch}")


def list_devices() -> list[tuple[str, str]]:
    """(device, full name) for every device OpenVINO Runtime sees."""
    import openvino as ov

    core = ov.Core()
    return [(device, core.get_property(device, "FULL_DEVICE_NAME")) for device in core.available_devices]


def has_intel_gpu(devices: list[tuple[str, str]] | None = None) -> bool:
    """True when OpenVINO sees a GPU device (its GPU plugin drives Intel GPUs only)."""
    devices = list_devices() if devices is None else devices
    return any(device.startswith("GPU") for device, _ in devices)


def default_device(devices: list[tuple[str, str]] | None = None) -> str:
    """`GPU` when an Intel GPU is present, else `CPU`."""
    return "GPU" if has_intel_gpu(devices) else "CPU"


@dataclass(frozen=True)
class UpstreamSupport:
    """What the installed optimum-intel and OpenVINO GenAI can do for this pair."""

    optimum_intel: str | None
    optimum_exports_minicpm_ocr: bool
    optimum_exports_pruned_dspark: bool
    genai_has_draft_model: bool
    genai_has_markov_head: bool
    notes: tuple[str, ...] = ()

    @property
    def export_path(self) -> str:
        """`optimum-cli` when optimum-intel exports both models, else `suite` (our exporter)."""
        return "optimum-cli" if self.optimum_exports_minicpm_ocr and self.optimum_exports_pruned_dspark else "suite"

    @property
    def runtime_path(self) -> str:
        """`VLMPipeline` when GenAI runs DSpark drafts on exports it can read, else `suite` (our loop)."""
        upstream = self.export_path == "optimum-cli" and self.genai_has_draft_model and self.genai_has_markov_head
        return "VLMPipeline" if upstream else "suite"


def _probe_optimum(notes: list[str]) -> tuple[str | None, bool, bool]:
    try:
        version = importlib.metadata.version("optimum-intel")
    except importlib.metadata.PackageNotFoundError:
        notes.append("optimum-intel is not installed (expected: it cannot be installed next to transformers>=5.21)")
        return None, False, False
    try:
        from optimum.exporters.tasks import TasksManager

        TasksManager.get_supported_tasks_for_model_type("minicpm_ocr", exporter="openvino",
                                                        library_name="transformers")
        minicpm_ocr = True
    except Exception as error:  # an old optimum-intel raises KeyError; a broken install anything
        notes.append(f"optimum-intel {version} cannot export minicpm_ocr: {type(error).__name__}")
        minicpm_ocr = False
    spec = importlib.util.find_spec("optimum.exporters.openvino")
    package_dir = Path(spec.origin).parent if spec and spec.origin else None
    pruned = bool(package_dir) and any("draft_vocab_size" in path.read_text(errors="ignore")
                                       for path in package_dir.rglob("*.py"))
    if not pruned:
        notes.append(f"optimum-intel {version} has no pruned-vocabulary DSpark export (no draft_vocab_size)")
    return version, minicpm_ocr, pruned


def _probe_genai(notes: list[str]) -> tuple[bool, bool]:
    try:
        import openvino_genai as ov_genai
    except ImportError as error:
        notes.append(f"openvino-genai is not importable: {error}")
        return False, False
    draft_model = hasattr(ov_genai, "draft_model")
    markov = hasattr(ov_genai.GenerationConfig(), "markov_head_top_k")
    if not markov:
        notes.append("OpenVINO GenAI has no Markov head (GenerationConfig.markov_head_top_k): no DSpark drafts")
    return draft_model, markov


def probe_upstream() -> UpstreamSupport:
    """Probes the installed optimum-intel and OpenVINO GenAI for what this suite needs from them."""
    notes: list[str] = []
    version, minicpm_ocr, pruned = _probe_optimum(notes)
    draft_model, markov = _probe_genai(notes)
    return UpstreamSupport(version, minicpm_ocr, pruned, draft_model, markov, tuple(notes))
