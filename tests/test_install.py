"""The light install: README and every notebook take PyTorch's CPU build first, with the pins of
requirements.txt, and skip it where that torch is installed (CI never reaches PyTorch's index); the README's
test commands are the ones CI runs; the install's size and torch build are reported."""

from __future__ import annotations

import json
import re

import pytest

from utils.models import REPO_ROOT
from utils.stack import REQUIREMENTS, install_report, installed_size, torch_build

CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"
NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("0*.ipynb"))
README = (REPO_ROOT / "README.md").read_text()
CI = (REPO_ROOT / ".ci" / "run").read_text()


def _pins() -> dict[str, str]:
    pins = dict(re.findall(r"^(torch|torchvision)==(\S+)", REQUIREMENTS.read_text(), flags=re.MULTILINE))
    assert set(pins) == {"torch", "torchvision"}
    return pins


def _install_cell(notebook) -> str:
    cells = [cell for cell in json.loads(notebook.read_text())["cells"] if cell["cell_type"] == "code"
             and "%pip install" in "".join(cell["source"]) and "requirements.txt" in "".join(cell["source"])]
    assert len(cells) == 1, notebook.name
    return "".join(cells[0]["source"])


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.name)
def test_every_notebook_installs_the_pinned_cpu_torch_only_when_it_is_missing(notebook):
    cell, pins = _install_cell(notebook), _pins()
    torch_line = next(line for line in cell.splitlines() if CPU_INDEX in line)
    assert f'"torch=={pins["torch"]}" "torchvision=={pins["torchvision"]}"' in torch_line
    assert torch_line.startswith("    %pip install")  # indented: under the check, so CI never runs it
    assert f'version("torch").split("+")[0] == "{pins["torch"]}"' in cell
    assert cell.index(CPU_INDEX) < cell.index("%pip install -q -r ../requirements.txt")  # CPU torch first


def test_the_readme_quick_start_installs_the_cpu_build_first_and_ci_never_names_its_index():
    pins = _pins()
    cpu = f"python -m pip install torch=={pins['torch']} torchvision=={pins['torchvision']} {CPU_INDEX}"
    assert cpu in README and README.index(cpu) < README.index("python -m pip install -r requirements-test.txt")
    assert "download.pytorch.org" not in CI


def test_the_readme_test_commands_are_what_ci_runs():
    block = README.split("```bash", 1)[1].split("```", 1)[0]  # the quick start
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    readme_tests = [command for command in commands if "pytest" in command]
    ci_tests = [line.strip() for line in CI.splitlines() if "pytest" in line and not line.lstrip().startswith("#")]
    assert readme_tests == ci_tests[:1] == ["python -m pytest --nbval"]  # then CI reruns the notebooks on AVX2


def test_the_install_report_says_the_size_and_the_torch_build():
    import torch

    build = torch_build()
    assert build == (f"cuda {torch.version.cuda}" if torch.version.cuda else "cpu") or build.startswith("rocm")
    size = installed_size()
    assert 0 < size["nvidia_and_triton"] < size["site_packages"] or (build == "cpu" and size["nvidia_and_triton"] == 0)
    report = install_report()
    assert re.fullmatch(r"site-packages: \d+\.\d GB, of which nvidia and triton wheels \d+\.\d GB; "
                        r"torch \S+, (cpu|cuda \S+|rocm \S+) build", report), report
    print(f"\n{report}")
