"""The upstream export path: `optimum-cli export openvino`, taken only when the installed optimum-intel can do it.

Which path works is decided by `utils.stack.probe_upstream()` (a capability probe). The command is also what
the notebooks show next to our own exporter, so readers see the one-liner they will use once optimum-intel
ships MiniCPM-OCR and pruned-vocabulary DSpark export (#2098/#2099).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["optimum_command", "run_optimum_export"]


def optimum_command(kind: str, model: Path | str, out: Path | str, *, weight_format: str = "fp32") -> list[str]:
    """The `optimum-cli export openvino` command for the target (`kind="target"`) or the draft (`"draft"`)."""
    if kind not in ("target", "draft"):
        raise ValueError(f"kind={kind!r} must be 'target' or 'draft'")
    command = ["optimum-cli", "export", "openvino", "--model", str(model)]
    if kind == "target":
        command += ["--task", "image-text-to-text"]
    return command + ["--weight-format", weight_format, str(out)]


def run_optimum_export(kind: str, model: Path | str, out: Path | str, *, weight_format: str = "fp32",
                       support=None) -> Path:
    """Runs `optimum_command` if the installed optimum-intel can export `kind`; a clear error otherwise.

    Args:
        kind: "target" or "draft".
        model: the source folder or hub id.
        out: the IR folder optimum-cli writes.
        weight_format: passed to `--weight-format`.
        support: a `utils.stack.UpstreamSupport` (default: probed now).
    """
    from utils.stack import probe_upstream

    support = support or probe_upstream()
    capable = support.optimum_exports_minicpm_ocr if kind == "target" else support.optimum_exports_pruned_dspark
    if not capable:
        reasons = "; ".join(support.notes) or "no reason given"
        raise ValueError(f"--backend optimum: the installed optimum-intel cannot export this {kind} ({reasons}); "
                         f"use --backend suite")
    subprocess.run(optimum_command(kind, model, out, weight_format=weight_format), check=True)
    return Path(out)
