"""The tiny MiniCPM-OCR + DSpark pair, built offline: the embedded default of CI, Binder and first runs.

`python -m utils.tiny --out DIR [--seed N ...] [--pretrain | --read] [--distill] [--manifest]` or
`build_tiny_pair(DIR)` build a pair; `default_pair()` is the trained pair shipped in `utils/tiny/default`, which the
notebooks and `python -m utils.ocr` use (checked against its manifest, never retrained on first use).
"""

from utils.tiny.pair import (BUILD_STAMP, SHIPPED_PAIR_DIR, DistillConfig, PretrainConfig, ReaderConfig, TinyPair,
                             TinyPairConfig, build_tiny_pair, default_pair)

__all__ = ["BUILD_STAMP", "DistillConfig", "PretrainConfig", "ReaderConfig", "TinyPair", "TinyPairConfig",
           "build_tiny_pair", "default_pair", "SHIPPED_PAIR_DIR"]
