"""torch nn.Modules and HF-style configs (no PyTerrier imports here)."""

from pyterrier_tite.modeling.tite import TiteModel, TiteModelOutput, TitePackedOutput
from pyterrier_tite.modeling.tite_config import TiteConfig
from pyterrier_tite.modeling.tite_from_bert import tite_config_from_bert, tite_from_bert

__all__ = ["TiteConfig", "TiteModel", "TiteModelOutput", "TitePackedOutput", "tite_config_from_bert", "tite_from_bert"]

from pyterrier_tite.modeling.celi import CeliHead, MeanPoolHead, PairStates  # noqa: E402
from pyterrier_tite.modeling.sparse_ce import (  # noqa: E402
    SparseCrossEncoder,
    SparseCrossEncoderBatch,
    SparseCrossEncoderConfig,
    SparseCrossEncoderModel,
    SparseCrossEncoderModelForSequenceClassification,
)

__all__ += [
    "CeliHead",
    "MeanPoolHead",
    "PairStates",
    "SparseCrossEncoder",
    "SparseCrossEncoderBatch",
    "SparseCrossEncoderConfig",
    "SparseCrossEncoderModel",
    "SparseCrossEncoderModelForSequenceClassification",
]
