"""The PyTorch reference the OpenVINO export and engine are tested against.

- `modeling`: the DSpark draft model (block forward with its context cache, logits, confidence head).
- `markov`: the dense and Top-K Markov walks, and the proposal they make.
- `speculative`: the naive speculative loop over the transformers target (the oracle).
"""
