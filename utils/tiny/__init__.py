"""The tiny MiniCPM-OCR + DSpark pair, built offline: the embedded default of CI, Binder and first runs.

`python -m utils.tiny --out DIR [--seed N ...]` or `build_tiny_pair(DIR)`.
"""

from utils.tiny.pair import BUILD_STAMP, TinyPair, TinyPairConfig, build_tiny_pair

__all__ = ["BUILD_STAMP", "TinyPair", "TinyPairConfig", "build_tiny_pair"]
