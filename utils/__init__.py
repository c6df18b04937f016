"""Helpers for the DSpark OCR notebooks, one package per role, in the order data flows through the suite.

Build side (torch):
- `utils.tiny`: builds the tiny MiniCPM-OCR target and its tiny DSpark draft offline; the shipped pair.
- `utils.reference`: the DSpark draft in PyTorch, its Markov walks, and the naive speculative loop (the oracle).
- `utils.export`: target and draft -> OpenVINO IR, and NNCF weight compression.

The seam:
- `utils.contract`: the IR contract: file names, port names, rt_info keys, weight formats, the language
  model's config; export writes by it, the runtime reads by it. `utils.contract.processor` reads a folder's
  processor files, `utils.contract.target.ExportedTarget` a whole exported target folder, once.
- `utils.checkpoint`: the published draft checkpoint layout, validated with numpy.

Inference side (numpy + OpenVINO, no torch):
- `utils.engine`: the decoding engine: language-model session with rollback, the draft's IRs, proposers,
  verification, the decoder and its metrics.
- `utils.pipeline`: the OCR app: preprocessing, vision, prompt and tokenizer around the engine; the GenAI path.

Around them:
- `utils.evaluation`: sample pages, acceptance statistics, comparisons, the benchmark, plots.
- `utils.notebook`: widgets, tables and the per-step view of the notebooks and the web app.
- `utils.models`: where model folders live; the default pair's IR; the real checkpoints' download.
- `utils.stack` (what is installed and which devices exist) and `utils.files` (atomic folders, hashes).
- Command lines: `python -m utils.ocr`, `python -m utils.bench`, `python -m utils.export`, `python -m utils.tiny`.

`.importlinter` states these layers and `tests/test_architecture.py` checks them. Importing `utils` is cheap:
no submodule is imported here, so the inference path never pulls in torch.
"""
