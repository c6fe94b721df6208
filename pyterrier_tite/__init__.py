"""pyterrier_tite: efficient neural IR models (TITE, sparse cross-encoders, CELI, Aggretriever, SPLADE) as
PyTerrier transformers."""

import torch  # noqa: F401  (must precede the compiled extension, which links against libc10)

from pyterrier_tite import ops
from pyterrier_tite.families import PUBLIC

__version__ = "0.1.0"

__all__ = ["__version__", "ops"]

# PyTerrier, ir_datasets and pyterrier_dr take seconds to import and the kernels / models need none of them
# (a GPU box may have torch alone): everything PyTerrier-facing is loaded on first use.
_LAZY = dict(PUBLIC)  # the transformer of every model family (families.py)
_LAZY.update(load="pyterrier_tite.pt.artifacts")  # any model name (shipped, folder, hub id) -> its transformer
_LAZY.update({name: "pyterrier_tite.pt.first_stage" for name in ("bm25", "trec_dl_bm25")})
_LAZY.update(pisa_index="pyterrier_tite.store.pisa_build")  # a collection's cached PISA index
_LAZY_MODULES = ("datasets",)
__all__ += [*_LAZY, *_LAZY_MODULES]


def __getattr__(name: str):
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _LAZY_MODULES:
        return importlib.import_module(f"pyterrier_tite.{name}")
    raise AttributeError(f"module 'pyterrier_tite' has no attribute {name!r}")
