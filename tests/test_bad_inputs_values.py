"""Odd values through the Python API (issue 64, class 8): ``bytes`` texts, NaN model outputs, integer tensors.

Each cell asserts the contracted outcome: the answer of the clean input, or a ``ValueError`` / ``CheckpointError``
that names the column, id, tensor or value. The matrix:

- **bytes** (every transformer x bytes value): ``bytes`` in ``query`` or the text field (``text``, or a configured
  ``body``) gives the answer of the UTF-8-decoded ``str`` (also when one qid's rows carry the query once as ``str``
  and once as ``bytes``); bytes that are not UTF-8 are a ``ValueError`` naming the column and the id. Index builds
  (BM25, ``Splade.indexer``, ``TITE >> FlexIndex``) x bytes text: the index of the decoded corpus, or the error and
  nothing at the path.
- **NaN outputs** (every neural transformer x NaN weights): a model whose weights hold NaN gives a ``ValueError``
  saying it produced NaN scores / vectors / term weights, with the count, the first qid / docno and the cause (the
  weight that holds NaN), instead of a pandas error inside ``add_ranks`` or NaN vectors written into an index;
  non-finite scores given by any model are counted the same way (:func:`refuse_non_finite`).
- **integer tensors** (every checkpoint loader x an integer tensor where the model holds floats): a
  ``CheckpointError`` naming the tensor, its dtype and the expected one (strict loading used to cast it silently);
  integer tensors the model holds as integers (``position_ids``) and float16 tensors still load.

Models are the tiny offline hub fixtures (``../shared/hub``).
"""

from __future__ import annotations

import copy
import shutil
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from _hub import require_fixtures, snapshot
from _input_matrix import assert_same_answer, bm25_retriever, build_bm25, build_dense, build_splade, load_models

pytestmark = pytest.mark.usefixtures("single_thread")

#: "vitamin b" makes the old ``str(b'...')`` reading (an extra term ``b``) visible to BM25 too
WORDS = "red blue hot cold dense".split()
DOCS = [{"docno": f"d{i}", "text": f"plasma physics of {w} stars"} for i, w in enumerate(WORDS)] + [
    {"docno": "d5", "text": "vitamin b café"}
]
QUERIES = pd.DataFrame({"qid": ["q1", "q2"], "query": ["hot plasma", "cold dense café stars"]})
RESULTS = pd.DataFrame(
    {
        "qid": ["q1", "q1", "q1", "q2", "q2"],
        "query": ["hot plasma"] * 3 + ["cold dense café stars"] * 2,
        "docno": ["d0", "d1", "d2", "d0", "d5"],
        "text": [DOCS[i]["text"] for i in (0, 1, 2, 0, 5)],
    }
)
NOT_UTF8 = b"caf\xe9 \xff stars"  # Latin-1, not UTF-8


# ---------------------------------------------------------------------------------------------------- models, indexes
@pytest.fixture(scope="module")
def models():
    return load_models()


def dense_retriever(path, models):
    import pyterrier_dr

    return models["TITE"].query_encoder() >> pyterrier_dr.FlexIndex(str(path)).np_retriever()


#: index kind -> (build(path, docs, models), retriever(path, models))
INDEXES = {
    "bm25": (build_bm25, bm25_retriever),
    "Splade.indexer": (build_splade, lambda p, m: m["Splade"].retriever(str(p))),
    "TITE>>FlexIndex": (build_dense, dense_retriever),
}


@pytest.fixture(scope="module")
def indexes(models, tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("indexes")
    for name, (build, _) in INDEXES.items():
        build(folder / name, DOCS, models)
    return {name: folder / name for name in INDEXES}


def with_field(model, field: str):
    """A shallow copy of a model (same torch module) reading documents from ``field``."""
    other = copy.copy(model)
    other.text_field = field
    return other


# ------------------------------------------------------------------------------------------------------------ bytes
#: stage -> (frame it takes, how to make it from the models / indexes)
STAGES = {
    "SparseCE": ("results", lambda m, i: m["SparseCE"]),
    "MonoCE": ("results", lambda m, i: m["MonoCE"]),
    "CELI": ("results", lambda m, i: m["CELI"]),
    **{
        f"{kind}.{stage}": (frame, lambda m, i, kind=kind, stage=stage: getattr(m[kind], stage)())
        for kind in ("TITE", "BertBiEncoder", "Aggretriever", "Splade")
        for stage, frame in (("query_encoder", "queries"), ("doc_encoder", "docs"), ("scorer", "results"))
    },
    "bm25": ("topics", lambda m, i: bm25_retriever(i["bm25"], m)),
    "Splade.retriever": ("topics", lambda m, i: INDEXES["Splade.indexer"][1](i["Splade.indexer"], m)),
    "TITE>>FlexIndex.np_retriever": ("topics", lambda m, i: dense_retriever(i["TITE>>FlexIndex"], m)),
    # the models themselves as transformers (they pick a stage by the columns)
    "TITE": ("results", lambda m, i: m["TITE"]),
    "Splade": ("results", lambda m, i: m["Splade"]),
    # the configured text field
    "SparseCE(text_field=body)": ("results", lambda m, i: with_field(m["SparseCE"], "body")),
    "TITE(text_field=body).doc_encoder": ("docs", lambda m, i: with_field(m["TITE"], "body").doc_encoder()),
    "Splade(text_field=body).scorer": ("results", lambda m, i: with_field(m["Splade"], "body").scorer()),
}


def clean_frame(stage: str) -> pd.DataFrame:
    kind = STAGES[stage][0]
    frame = {"results": RESULTS, "docs": pd.DataFrame(DOCS)}.get(kind, QUERIES).copy()
    return frame.rename(columns={"text": "body"}) if "body" in stage else frame


def text_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in ("text", "body") if c in frame]


def _encoded(frame: pd.DataFrame, columns, rows=None) -> pd.DataFrame:
    out = frame.copy()
    for column in columns:
        values = out[column].astype(object).tolist()
        for row in range(len(values)) if rows is None else rows(len(values)):
            values[row] = values[row].encode("utf-8")
        out[column] = pd.Series(values, index=out.index, dtype=object)
    return out


def _set(frame: pd.DataFrame, columns, row: int, value) -> pd.DataFrame:
    out = frame.copy()
    for column in columns:
        values = out[column].astype(object).tolist()
        values[row] = value
        out[column] = pd.Series(values, index=out.index, dtype=object)
    return out


#: case -> (the columns it needs, the bad frame made from a clean one)
CASES = {
    "bytes query": ({"query"}, lambda f: _encoded(f, ["query"])),
    "bytes and str of one query": ({"query"}, lambda f: _encoded(f, ["query"], rows=lambda n: [n - 1])),
    "bytes text": ({"text"}, lambda f: _encoded(f, text_columns(f))),
    "bytes in one text": ({"text"}, lambda f: _encoded(f, text_columns(f), rows=lambda n: [n - 1])),
    "not UTF-8 query": ({"query"}, lambda f: _set(f, ["query"], len(f) - 1, NOT_UTF8)),
    "not UTF-8 text": ({"text"}, lambda f: _set(f, text_columns(f), 1, NOT_UTF8)),
}
#: what each refused case must say
REFUSED = {
    "not UTF-8 query": r"query for qid 'q2' is bytes that are not valid UTF-8 \(byte 0xe9 at position 3\)",
    "not UTF-8 text": r"{field} for docno 'd1' is bytes that are not valid UTF-8 \(byte 0xe9 at position 3\)",
}


def bytes_cells():
    for stage in STAGES:
        columns = set(clean_frame(stage).columns) | ({"text"} if "body" in stage else set())
        for case, (needs, _) in CASES.items():
            if needs <= columns:
                yield pytest.param(stage, case, id=f"{stage}-{case}")


def comparable(out: pd.DataFrame) -> pd.DataFrame:
    keys = [c for c in ("qid", "rank", "docno") if c in out]
    return out.sort_values(keys, kind="stable").reset_index(drop=True)


@pytest.mark.parametrize(("stage", "case"), list(bytes_cells()))
def test_bytes(models, indexes, stage, case):
    transformer = STAGES[stage][1](models, indexes)
    clean = clean_frame(stage)
    bad = CASES[case][1](clean)
    if case in REFUSED:
        with pytest.raises(ValueError, match=REFUSED[case].format(field="body" if "body" in stage else "text")):
            transformer(bad)
        return
    assert_same_answer(comparable(transformer(bad)), comparable(transformer(clean)), ids_as_str=True)


BUILDS = {
    "bytes text": (lambda: [{**d, "text": d["text"].encode()} for d in DOCS], None),
    "not UTF-8 text": (
        lambda: [*DOCS, {"docno": "d9", "text": NOT_UTF8}],
        r"text for docno 'd9' is bytes that are not valid UTF-8 \(byte 0xe9 at position 3\)",
    ),
}


def run_of(retriever, queries=QUERIES) -> list[tuple[str, str]]:
    out = retriever(queries).sort_values(["qid", "rank"], kind="stable")
    return list(zip(out["qid"].astype(str), out["docno"].astype(str), strict=True))


@pytest.mark.parametrize("case", list(BUILDS))
@pytest.mark.parametrize("index_kind", list(INDEXES))
def test_bytes_index_builds(models, indexes, tmp_path, index_kind, case):
    build, retriever = INDEXES[index_kind]
    corpus, refused = BUILDS[case]
    path = tmp_path / "index"
    if refused:
        with pytest.raises(ValueError, match=refused):
            build(path, corpus(), models)
        assert list(tmp_path.iterdir()) == [], "nothing at the path, no staging folder"
        return
    build(path, corpus(), models)
    assert run_of(retriever(path, models)) == run_of(retriever(indexes[index_kind], models))


def test_bytes_in_document_fields_of_a_checked_corpus():
    """The corpus check every index build runs decodes bytes in each text field it reads."""
    from pyterrier_tite.store.corpus import checked_corpus

    docs = [{"docno": "d0", "title": "Caf\u00e9".encode(), "text": b"stars"}]
    assert list(checked_corpus(iter(docs), ["title", "text"])) == [{"docno": "d0", "title": "Café", "text": "stars"}]


# ------------------------------------------------------------------------------------------------------ NaN outputs
def torch_module(models, kind: str) -> torch.nn.Module:
    """The torch module behind a model's outputs: a reranker's scorer, SPLADE's MLM, a bi-encoder's encoder."""
    if kind in ("SparseCE", "MonoCE", "CELI"):
        return models[kind].scorer
    return models[kind].encoder if kind == "Splade" else models[kind].model


@contextmanager
def nan_weights(module: torch.nn.Module, value: float = float("nan")):
    """The module's first floating parameter (the word embeddings) filled with ``value``, restored afterwards."""
    name, parameter = next((n, p) for n, p in module.named_parameters() if p.is_floating_point())
    saved = parameter.detach().clone()
    with torch.no_grad():
        parameter.fill_(value)
    try:
        yield name
    finally:
        with torch.no_grad():
            parameter.copy_(saved)


def _scores(what, count, total, first):
    return rf"produced NaN {what} for {count} of {total} rows \(first: {first}\).*weights hold NaN"


NAN_STAGES = {
    **{kind: ("results", _scores("scores", 5, 5, "qid 'q1', docno 'd0'")) for kind in ("SparseCE", "MonoCE", "CELI")},
    **{
        f"{kind}.{stage}": (frame, _scores(what, *counts))
        for kind in ("TITE", "BertBiEncoder", "Aggretriever")
        for stage, frame, what, counts in (
            ("query_encoder", "queries", "query vectors", (2, 2, "qid 'q1'")),
            ("doc_encoder", "docs", "doc vectors", (6, 6, "docno 'd0'")),
            ("scorer", "results", "query vectors", (5, 5, "qid 'q1', docno 'd0'")),
        )
    },
    "Splade.query_encoder": ("queries", _scores("query term weights", 2, 2, "qid 'q1'")),
    "Splade.doc_encoder": ("docs", _scores("doc term weights", 6, 6, "docno 'd0'")),
    "Splade.scorer": ("results", _scores("scores", 5, 5, "qid 'q1', docno 'd0'")),
    "Splade.retriever": ("topics", _scores("query term weights", 2, 2, "qid 'q1'")),
    "TITE>>FlexIndex.np_retriever": ("topics", _scores("query vectors", 2, 2, "qid 'q1'")),
    "Splade.indexer": ("build", _scores("doc term weights", 6, 6, "docno 'd0'")),
    "TITE>>FlexIndex": ("build", _scores("doc vectors", 6, 6, "docno 'd0'")),
}


@pytest.mark.parametrize("stage", list(NAN_STAGES))
def test_nan_weights(models, indexes, tmp_path, stage):
    kind_of_frame, message = NAN_STAGES[stage]
    kind = stage.split(".")[0].split(">>")[0]
    module = torch_module(models, kind)
    with nan_weights(module) as name, pytest.raises(ValueError, match=message) as error:
        if kind_of_frame == "build":
            INDEXES[stage][0](tmp_path / "index", DOCS, models)
        else:
            transformer = (
                STAGES[stage][1](models, indexes) if stage in STAGES else getattr(models[kind], stage.split(".")[1])()
            )
            transformer({"results": RESULTS, "docs": pd.DataFrame(DOCS)}.get(kind_of_frame, QUERIES).copy())
    assert name in str(error.value), "the message names the weight that holds NaN"
    assert list(tmp_path.iterdir()) == [], "nothing written"


def test_nan_cause_without_nan_weights_names_fp16_overflow():
    from pyterrier_tite.pt.validation import refuse_non_finite

    frame = RESULTS.assign(score=[1.0, np.inf, 2.0, -np.inf, 3.0])
    with pytest.raises(ValueError, match=r"M produced infinite scores for 2 of 5 rows \(first: qid 'q1', docno "
                       r"'d1'\).*float16.*dtype=torch.float32"):  # fmt: skip
        refuse_non_finite(frame["score"].to_numpy(), frame, "scores", "M", modules=[torch.nn.Linear(2, 2)],
                          precision="fp16")  # fmt: skip
    refuse_non_finite(RESULTS.assign(score=1.0)["score"].to_numpy(), RESULTS, "scores", "M")  # finite: nothing


def test_given_vectors_with_nan_are_named_by_the_dense_scorer(models):
    frame = RESULTS.assign(
        query_vec=list(models["TITE"].encode_queries(RESULTS["query"])),
        doc_vec=list(models["TITE"].encode_docs(RESULTS["text"])),
    )
    frame.at[3, "doc_vec"] = np.full_like(frame.at[3, "doc_vec"], np.nan)
    with pytest.raises(ValueError, match=r"doc_vec holds NaN for 1 of 5 rows \(first: qid 'q2', docno 'd0'\)"):
        models["TITE"].scorer()(frame)
    frame.at[3, "doc_vec"] = None  # a missing cell: named by id too, not numpy's "inhomogeneous shape"
    with pytest.raises(ValueError, match=r"doc_vec holds NaN for 1 of 5 rows \(first: qid 'q2', docno 'd0'\)"):
        models["TITE"].scorer()(frame)


# ------------------------------------------------------------------------------------------------- integer tensors
def doctored(repo: str, folder: Path, change) -> Path:
    """A copy of a fixture snapshot whose weights (``model.safetensors``, written from ``pytorch_model.bin`` where
    that is the only file) pass through ``change(state) -> state``."""
    from safetensors.torch import load_file, save_file

    require_fixtures()
    shutil.copytree(snapshot(repo), folder)
    if (folder / "model.safetensors").is_file():
        state = load_file(folder / "model.safetensors")
    else:
        state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        (folder / "pytorch_model.bin").unlink()
    state = {k: v.clone().contiguous() for k, v in change(state).items()}
    save_file(state, folder / "model.safetensors")
    return folder


def as_dtype(key: str, dtype: torch.dtype):
    def change(state):
        assert key in state, sorted(state)
        return {**state, key: (state[key] * 100).to(dtype)}

    return change


def _loader(name: str):
    import pyterrier_tite as t

    def load(folder):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return (
                getattr(t, name)(str(folder), device="cpu")
                if name in ("MonoCE", "CELI")
                else getattr(t, name).from_pretrained(str(folder), device="cpu")
            )

    return load


#: loader -> (repo, checkpoint tensor, the model tensor named, how the model holds it)
INTEGER_TENSORS = {
    "TITE": ("webis/tite-2-late-msmarco", "encoder.layers.0.mlp.norm.weight", "encoder.layers.0.mlp.norm.weight"),
    "TITE(pre-training layout)": (
        "webis/tite-2-late",
        "tite.encoder.layers.1.attention.key.bias",
        "encoder.layers.1.attention.key.bias",
    ),
    "SparseCE": ("webis/sparse-cross-encoder-4-4096", "bert.encoder.layer.0.output.dense.bias", "output.dense.bias"),
    "CELI": ("webis/sparse-cross-encoder-4-4096", "bert.embeddings.word_embeddings.weight", "word_embeddings.weight"),
    "MonoCE": ("naver/splade-cocondenser-ensembledistil", "bert.embeddings.LayerNorm.bias", "LayerNorm.bias"),
    "Splade": (
        "naver/splade-cocondenser-ensembledistil",
        "bert.encoder.layer.0.attention.self.query.weight",
        "layer.0.attention.self.query.weight",
    ),
    "BertBiEncoder": (
        "naver/efficient-splade-V-large-query",
        "distilbert.transformer.layer.0.output_layer_norm.weight",
        "layer.0.output_layer_norm.weight",
    ),
    "Aggretriever": ("castorini/aggretriever-cocondenser", "tok_proj.weight", "term_weight.weight"),  # its name here
}


#: every loader with int64; one per loading path (``load_exactly`` / transformers) with int32 and bool
INTEGER_CELLS = [(loader, torch.int64) for loader in INTEGER_TENSORS] + [
    (loader, dtype) for loader in ("TITE", "Splade") for dtype in (torch.int32, torch.bool)
]


@pytest.mark.parametrize(("loader", "dtype"), INTEGER_CELLS, ids=[f"{n}-{str(d)[6:]}" for n, d in INTEGER_CELLS])
def test_integer_tensor_where_the_model_holds_floats(tmp_path, loader, dtype):
    from pyterrier_tite.models import CheckpointError

    repo, key, named = INTEGER_TENSORS[loader]
    folder = doctored(repo, tmp_path / "m", as_dtype(key, dtype))
    expected = str(dtype).removeprefix("torch.")
    with pytest.raises(CheckpointError, match=rf"{named.replace('.', '[.]')} \(checkpoint {expected}, model float32\)"):
        _loader(loader.split("(")[0])(folder)


@pytest.mark.parametrize("loader", ["SparseCE", "Splade", "TITE"])
def test_integer_position_ids_and_float16_tensors_still_load(tmp_path, loader):
    """``position_ids`` stored as int32 (held as int64 by SparseCE, not held by transformers' BERT) and a float16
    weight (cast to the model's float32, as ever) load."""
    repo, key, _ = INTEGER_TENSORS[loader]

    def change(state):
        ids = {k: v.to(torch.int32) for k, v in state.items() if k.endswith("position_ids")}
        return {**state, **ids, key: state[key].to(torch.float16)}

    folder = doctored(repo, tmp_path / "m", change)
    _loader(loader)(folder)


def test_load_exactly_refuses_only_integer_into_floating():
    from pyterrier_tite.models.checkpoint import CheckpointError, load_exactly

    module = torch.nn.Linear(2, 2)
    module.register_buffer("ids", torch.arange(3))
    good = {"weight": torch.ones(2, 2, dtype=torch.float16), "bias": torch.zeros(2), "ids": torch.arange(3)}
    load_exactly(module, {**good, "ids": torch.arange(3, dtype=torch.int32)}, "toy")
    assert module.ids.dtype == torch.int64 and module.weight.dtype == torch.float32
    with pytest.raises(CheckpointError, match=r"cannot load toy exactly; 1 tensors with an integer dtype where the "
                       r"model holds floats: weight \(checkpoint int64, model float32\)"):  # fmt: skip
        load_exactly(module, {**good, "weight": torch.ones(2, 2, dtype=torch.int64)}, "toy")


def test_joined_text_fields_decode_bytes_or_name_the_field():
    """``join_text_columns`` (a pipeline joining title and text before a model) reads bytes as UTF-8 too."""
    from pyterrier_tite.text import join_text_columns

    joined = join_text_columns(pd.DataFrame({"docno": ["d0"], "title": [b"caf\xc3\xa9"], "text": ["au lait"]}))
    assert joined["text"].tolist() == ["café au lait"]
    with pytest.raises(ValueError, match="title is bytes that are not valid UTF-8"):
        join_text_columns(pd.DataFrame({"docno": ["d0"], "title": [b"\xff"], "text": ["x"]}))
