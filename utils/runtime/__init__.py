"""Inference on OpenVINO Runtime with numpy only: no torch, no transformers on this path."""
