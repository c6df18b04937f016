"""The app's Voila settings, as the README's voila command gives them and as `.binder/jupyter_config.json` gives them
to Binder's Jupyter server: the browser tests start Voila with the README's, and a test checks both say the same."""

from __future__ import annotations

import json
import shlex

from utils.models import REPO_ROOT

__all__ = ["README_COMMAND", "readme_voila_options", "as_settings", "binder_settings"]

README_COMMAND = "voila app/speculative-ocr.ipynb"  # how the README's line starts


def readme_voila_options() -> list[str]:
    """The options of the README's voila command (`--Class.trait=value`), its continued lines joined."""
    lines = (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    first = next(index for index, line in enumerate(lines) if line.startswith(README_COMMAND))
    command = ""
    for line in lines[first:]:
        command += line.split(" #")[0].rstrip()
        if not command.endswith("\\"):
            break
        command = command[:-1] + " "
    return shlex.split(command)[len(shlex.split(README_COMMAND)):]


def as_settings(options: list[str]) -> dict:
    """`--Class.trait=value` options as a Jupyter config file holds them: {Class: {trait: value}}."""
    settings = {}
    for option in options:
        name, value = option.removeprefix("--").split("=", 1)
        section, trait = name.split(".")
        settings.setdefault(section, {})[trait] = json.loads(value.lower() if value in ("True", "False") else value)
    return settings


def binder_settings() -> dict:
    """What `.binder/postBuild` installs as Binder's `jupyter_config.json`."""
    return json.loads((REPO_ROOT / ".binder" / "jupyter_config.json").read_text(encoding="utf-8"))
