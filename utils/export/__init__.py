"""Export of the MiniCPM-OCR target and the DSpark draft to OpenVINO IR.

Submodules are imported on demand (they need torch); importing `utils.export` itself is cheap.
"""
