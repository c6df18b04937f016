"""The DSpark draft: config and checkpoint validation (numpy) and the PyTorch reference model.

`config` and `checkpoint` need no torch, so the runtime can validate drafts too; `modeling` and `markov`
are the PyTorch reference the OpenVINO export and runtime are tested against.
"""
