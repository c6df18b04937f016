"""The process's one OpenVINO Core, which reads every IR of an exported folder and compiles it."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import openvino as ov

__all__ = ["openvino_core"]


@functools.cache
def openvino_core() -> ov.Core:
    """The process's one `ov.Core`: every IR the runtime reads and compiles shares it, not one Core per IR."""
    import openvino as ov

    return ov.Core()
