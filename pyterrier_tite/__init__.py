"""pyterrier_tite: efficient neural IR models (TITE, sparse cross-encoders, CELI, Aggretriever, SPLADE) as
PyTerrier transformers.

Public API only. torch is imported first because the compiled extension links against libc10.
"""

import torch  # noqa: F401  (must precede the compiled extension)

from pyterrier_tite import datasets, ops
from pyterrier_tite.pt.first_stage import bm25, pisa_index, trec_dl_bm25

__version__ = "0.1.0"

__all__ = ["__version__", "bm25", "datasets", "ops", "pisa_index", "trec_dl_bm25"]

# Dense bi-encoders import pyterrier_dr (seconds): loaded on first use so `pyterrier-tite --help` stays fast.
_LAZY = {"BertBiEncoder": "pyterrier_tite.pt.bert_biencoder", "TITE": "pyterrier_tite.pt.tite"}
_LAZY.update({name: "pyterrier_tite.pt.rerankers" for name in ("SparseCE", "MonoCE", "CELI")})  # cross-encoders
__all__ += list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pyterrier_tite' has no attribute {name!r}")
