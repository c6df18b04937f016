"""Helpers for the DSpark OCR notebooks.

The package is split by stage, in the order data flows through the suite:

- `utils.tiny`: builds the tiny MiniCPM-OCR target and its tiny DSpark draft offline.
- `utils.stack`: what is installed, which devices OpenVINO sees, and what upstream supports.
- `utils.files`: atomic folder writes and file hashes shared by every stage that writes.

Importing `utils` is cheap: no submodule is imported here, so the inference path never pulls in torch.
"""
