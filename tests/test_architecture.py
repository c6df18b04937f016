"""The architecture of README "Layout", enforced: import-linter checks the contracts in `.importlinter`."""

from __future__ import annotations

import configparser
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / ".importlinter"


def _contracts() -> configparser.ConfigParser:
    contracts = configparser.ConfigParser()
    contracts.read(CONFIG)
    return contracts


def test_the_import_contracts_hold(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    exit_code = lint_imports(config_filename=str(CONFIG), no_cache=True, no_logo=True)
    report = capsys.readouterr().out
    assert exit_code == 0, report
    names = [section for section in _contracts() if section.startswith("importlinter:contract:")]
    assert report.count(" KEPT") == len(names) == 4, report


def test_every_package_of_utils_is_in_the_layers():
    """A new package must take its place in the data flow, or the layers contract would not see it."""
    layered = {name.strip() for line in _contracts()["importlinter:contract:data-flow"]["layers"].splitlines()
               for name in line.split("|") if name.strip()}
    modules = {f"utils.{path.stem if path.is_file() else path.name}" for path in (ROOT / "utils").iterdir()
               if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()}
    assert modules <= layered, sorted(modules - layered)


def test_no_source_file_cites_a_document_users_do_not_have():
    """The design notes the suite was built from are not in the repository: code says what it means, or links
    docs/. A citation of those notes by their file name would send a reader to a file they cannot open."""
    needle = "DES" "IGN"  # split, so that this file does not cite it
    folders = ("utils", "benchmarks", "tests", "app", "notebooks", "docs")
    sources = [ROOT / "README.md"] + [path for folder in folders for suffix in ("py", "ipynb", "md")
                                      for path in (ROOT / folder).rglob(f"*.{suffix}")]
    citing = [str(path.relative_to(ROOT)) for path in sources
              if needle in path.read_text(encoding="utf-8")]
    assert sources and not citing, citing
