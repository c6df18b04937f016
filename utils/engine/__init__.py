"""The decoding engine, on OpenVINO Runtime with numpy only (no torch, no transformers).

- `language_model`: the target's text model with its state: prefill, decode, verify + accept (rollback).
- `draft`: the DSpark draft's IRs (backbone with its context cache, Markov head) and `DSparkProposer`.
- `proposal`: what a proposal is and the `Proposer` interface both decoding loops call.
- `verification`: greedy acceptance, shared with the PyTorch oracle loop.
- `decoder`: `SpeculativeDecoder`, the loop: prompt embeddings in, tokens and metrics out.
- `metrics`, `timing`: what a generation reports, and the clocks behind it.
- `device`: device choice and compile properties (precision).
"""
