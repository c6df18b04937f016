"""The upstream runtime path: `openvino_genai.VLMPipeline(..., draft_model=...)`, as in optimum-intel #2099.

It applies only when the installed packages support the pair end to end (`utils.stack.probe_upstream()`
says `runtime_path == "VLMPipeline"`): folders exported by `optimum-cli export openvino` and an OpenVINO
GenAI with the DSpark Markov head (openvino.genai #4848). No released package does yet, so this path is not
exercised here; the suite's own pipeline (`utils.pipeline.speculative_ocr`) is the default.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT

__all__ = ["genai_vlm_pipeline", "genai_generate"]


def genai_vlm_pipeline(target: Path | str, draft: Path | str | None, *, device: str = "GPU",
                       num_assistant_tokens: int = 15, cache_size_gb: int = 2):
    """A `VLMPipeline` over optimum-cli exports, with the DSpark draft when given.

    MiniCPM-OCR has linear-attention layers: the scheduler needs at least `num_assistant_tokens + 2`
    linear-attention blocks to roll them back after a partial acceptance.
    """
    import openvino_genai as ov_genai

    scheduler = ov_genai.SchedulerConfig()
    scheduler.cache_size = cache_size_gb
    scheduler.max_num_batched_tokens = 4096
    scheduler.num_linear_attention_blocks = num_assistant_tokens + 2
    options = {"scheduler_config": scheduler}
    if draft is not None:
        options["draft_model"] = ov_genai.draft_model(str(draft), device)
    return ov_genai.VLMPipeline(str(target), device, **options)


def genai_generate(pipeline, image, prompt: str = DEFAULT_PROMPT, *, max_new_tokens: int = 2048,
                   num_assistant_tokens: int = 15, markov_head_top_k: int | None = None):
    """Runs one OCR request; returns GenAI's result (`.texts`, `.extended_perf_metrics`).

    Args:
        image: a PIL image.
        markov_head_top_k: 0 selects the dense Markov walk; None keeps GenAI's default (the Top-64 scorer).
    """
    import openvino as ov
    import openvino_genai as ov_genai

    config = ov_genai.GenerationConfig()
    config.max_new_tokens = max_new_tokens
    config.num_assistant_tokens = num_assistant_tokens
    if markov_head_top_k is not None:
        config.markov_head_top_k = markov_head_top_k
    tensor = ov.Tensor(np.array(image.convert("RGB"))[None])
    return pipeline.generate(prompt, images=[tensor], generation_config=config)
