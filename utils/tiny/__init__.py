"""The tiny MiniCPM-OCR + DSpark pair, built offline: the embedded default of CI, Binder and first runs.

`python -m utils.tiny --out DIR [--seed N ...] [--pretrain] [--distill]` or `build_tiny_pair(DIR)`;
`default_pair(MODELS)`
is the trained pair the notebooks and `python -m utils.ocr` use.
"""

from utils.tiny.pair import (BUILD_STAMP, DistillConfig, PretrainConfig, TinyPair, TinyPairConfig, build_tiny_pair,
                             default_pair)

__all__ = ["BUILD_STAMP", "DistillConfig", "PretrainConfig", "TinyPair", "TinyPairConfig", "build_tiny_pair",
           "default_pair"]
