"""The OCR app around the decoding engine: page -> prompt embeddings -> `utils.engine` -> text (no torch).

- `preprocessing`: image -> pixel values, tile sizes and the chat prompt with its placeholders (numpy/PIL).
- `vision`: the vision and text-embedding IRs.
- `speculative_ocr`: `SpeculativeOcrPipeline`, preprocessing + vision + tokenizer + the engine's decoder.
- `genai`: OpenVINO GenAI's `VLMPipeline`, where the installed release can run the exported target.
"""
