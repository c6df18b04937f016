"""What every command line of the suite shares: its parser, argument checks and the JSON results option.

Each command checks its paths and value ranges while parsing, before it exports or compiles anything, and
a rejected argument is one line on stderr and exit code 2 (`python -m utils.ocr: error: argument --target:
nope does not exist`). `--help` shows every default. A JSON results file is always `--json FILE`; `--out`
always names a folder to create.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["CommandParser", "command_parser", "existing_file", "existing_dir", "existing_path", "new_file",
           "int_at_least", "float_between", "page_range", "add_json_option", "write_json", "plural",
           "process_seconds"]


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows "(default: ...)" after every option that has a default worth showing; keeps the description's lines."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        hidden = action.default is None or action.default is False or action.default == argparse.SUPPRESS
        if "(default" in help_text or hidden or not action.option_strings:
            return help_text
        default = " ".join(map(str, action.default)) if isinstance(action.default, (list, tuple)) else "%(default)s"
        return f"{help_text} (default: {default})"


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, `PROG: error: MESSAGE`, and exit code 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def command_parser(module: str, description: str) -> CommandParser:
    """The parser of `python -m MODULE`: usage names the command as it is run, --help shows the defaults."""
    return CommandParser(prog=f"python -m {module}", description=description, formatter_class=_HelpFormatter)


def existing_file(text: str) -> Path:
    """An argparse type: a file that exists."""
    return _existing(text, is_kind=Path.is_file, kind="a file")


def existing_dir(text: str) -> Path:
    """An argparse type: a folder that exists."""
    return _existing(text, is_kind=Path.is_dir, kind="a folder")


def existing_path(text: str) -> Path:
    """An argparse type: a file or a folder that exists."""
    return _existing(text, is_kind=Path.exists, kind="a file or a folder")


def _existing(text: str, *, is_kind: Callable[[Path], bool], kind: str) -> Path:
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text} does not exist")
    if not is_kind(path):
        raise argparse.ArgumentTypeError(f"{text} is not {kind}")
    return path


def new_file(text: str) -> Path:
    """An argparse type: a file to write, in a folder that exists."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"the folder of {text} ({path.parent}) does not exist")
    return path


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is out of range: it must be at least {minimum}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def float_between(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a number in [low, high]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if math.isnan(value) or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is out of range: it must be between {low:g} and {high:g}")
        return value

    parse.__name__ = f"number in [{low:g}, {high:g}]"
    return parse


def page_range(text: str) -> tuple[int, int]:
    """An argparse type: pages `N` or `FIRST-LAST`, counted from 1, as (first, last)."""
    first, _, last = text.partition("-")
    try:
        pages = int(first), int(last or first)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a page or a range of pages such as 1-3") from None
    if not 1 <= pages[0] <= pages[1]:
        raise argparse.ArgumentTypeError(f"{text} is not a range of pages: pages count from 1, first <= last")
    return pages


def add_json_option(parser: argparse.ArgumentParser, *, what: str, stdout: bool = False) -> None:
    """Adds `--json FILE`, the one name of a JSON results file; with `stdout`, FILE may be left out (or `-`)."""
    if stdout:
        parser.add_argument("--json", metavar="FILE", type=_json_target, nargs="?", const="-",
                            help=f"write {what} as JSON to FILE, or to standard output without FILE")
    else:
        parser.add_argument("--json", metavar="FILE", type=new_file, help=f"also write {what} as JSON to FILE")


def _json_target(text: str) -> Path | str:
    return text if text == "-" else new_file(text)


def write_json(target: Path | str, data) -> None:
    """Writes `data` as indented JSON to the file `target`, or to standard output when it is `-`."""
    text = json.dumps(data, indent=1) + "\n"
    if str(target) == "-":
        sys.stdout.write(text)
    else:
        Path(target).write_text(text)


def plural(count: int, noun: str) -> str:
    """`1 page`, `0 pages`, `2 pages`: a count and its noun, as messages write them."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def process_seconds() -> float:
    """Seconds since this process started, Python's start and imports included (Linux's /proc; 0.0 where it is
    not there): what a command's wall time counts from."""
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])  # field 22: starttime
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
