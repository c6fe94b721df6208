"""Nothing silently wrong (issue 16): bad input walked over every transformer, index and checkpoint loader.

Each cell asserts the contracted outcome: a ``ValueError`` / ``FileNotFoundError`` / ``CheckpointError`` /
``CorruptIndexError`` that names the column, id or file, or the correct answer. The matrix:

- **frames** (every transformer x bad frame): a missing (None / NaN) query or text is refused naming column and id;
  a NUL byte scores as a space; whitespace and integer ids give the answer of clean ``str`` ids (ids pass through;
  only BM25, whose engine gets the qids, refuses whitespace qids by name); one qid with two query texts is refused
  wherever a query is read; an empty frame gives an empty frame with the output columns.
- **index builds** (BM25 / SPLADE PISA builds, dense ``model >> pyterrier_dr.FlexIndex``) x bad corpus: missing
  text, bad / duplicate docnos, an empty corpus and a corpus that raises midway are errors that leave nothing at the
  path (no staging folder either); NUL bytes, integer docnos and a 1-document corpus index correctly.
- **damaged indexes**: PISA ones are opened in subprocesses (PISA aborts or segfaults on damaged files): a damaged
  primary file is a ``CorruptIndexError`` naming it, a damaged derived file (the compressed index / block-max data
  PISA writes on first use) is rebuilt; dense ones document pyterrier_dr's own behaviour (Python errors).
- **checkpoint folders** (every loader x bad folder): unreadable JSON names the file, a missing tensor is a
  ``CheckpointError`` naming it, a BERT folder is refused by TITE / Aggretriever (rerankers start a new head, with a
  warning), a missing local path or an uncached hub id fails at once.

Models are the tiny offline hub fixtures (``../shared/hub``).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _hub import snapshot
from _input_matrix import assert_same_answer, bm25_retriever, build_bm25, build_dense, build_splade, load_models
from _tolerance import assert_float_close

pytestmark = pytest.mark.usefixtures("single_thread")

WORDS = "red blue hot cold dense".split()
DOCS = [{"docno": f"d{i}", "text": f"plasma physics of {w} stars"} for i, w in enumerate(WORDS)]
QUERIES = pd.DataFrame({"qid": ["q1", "q2"], "query": ["hot plasma", "cold dense stars"]})
RESULTS = pd.DataFrame(
    {
        "qid": ["q1", "q1", "q1", "q2", "q2"],
        "query": ["hot plasma"] * 3 + ["cold dense stars"] * 2,
        "docno": ["d0", "d1", "d2", "d0", "d3"],
        "text": [DOCS[i]["text"] for i in (0, 1, 2, 0, 3)],
    }
)


# ---------------------------------------------------------------------------------------------------- models, indexes
@pytest.fixture(scope="module")
def models():
    return load_models()


#: index kind -> (build(path, docs, models), retriever(path, models))
INDEXES = {
    "bm25": (build_bm25, bm25_retriever),
    "Splade.indexer": (build_splade, lambda p, m: m["Splade"].retriever(str(p))),
    "TITE>>FlexIndex": (
        build_dense,
        lambda p, m: m["TITE"].query_encoder() >> __import__("pyterrier_dr").FlexIndex(str(p)).np_retriever(),
    ),
}


@pytest.fixture(scope="module")
def indexes(models, tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("indexes")
    for name, (build, _) in INDEXES.items():
        build(folder / name, DOCS, models)
    return {name: folder / name for name in INDEXES}


# ------------------------------------------------------------------------------------------------------------ frames
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
    "TITE>>FlexIndex.np_retriever": ("topics", lambda m, i: INDEXES["TITE>>FlexIndex"][1](i["TITE>>FlexIndex"], m)),
}


def clean_frame(kind: str) -> pd.DataFrame:
    if kind == "results":
        return RESULTS.copy()
    if kind == "docs":
        return pd.DataFrame(DOCS)
    return QUERIES.copy()


def _set(frame: pd.DataFrame, column: str, row: int, value) -> pd.DataFrame:
    values = frame[column].astype(object).tolist()
    values[row] = value
    return frame.assign(**{column: values})


def _ids(frame: pd.DataFrame, qid, docno) -> pd.DataFrame:
    out = frame.copy()
    if "qid" in out:
        out["qid"] = [qid(q) for q in out["qid"]]
    if "docno" in out:
        out["docno"] = [docno(d) for d in out["docno"]]
    return out


SPACED = {"qid": lambda q: q.replace("q", "q \n"), "docno": lambda d: d.replace("d", "d\n")}
#: case -> (the columns it needs, the bad frame made from a clean one)
CASES = {
    "None query": ({"query"}, lambda f: _set(f, "query", len(f) - 1, None)),
    "NaN query": ({"query"}, lambda f: _set(f, "query", len(f) - 1, math.nan)),
    "None text": ({"text"}, lambda f: _set(f, "text", 1, None)),
    "NaN text": ({"text"}, lambda f: _set(f, "text", 1, math.nan)),
    "NUL byte": (set(), lambda f: f.assign(**{c: f[c].str.replace(" ", "\0") for c in ("query", "text") if c in f})),
    "whitespace ids": (set(), lambda f: _ids(f, SPACED["qid"], SPACED["docno"])),
    "integer ids": (set(), lambda f: _ids(f, lambda q: int(q[1:]), lambda d: int(d[1:]))),
    "one qid two queries": ({"query", "qid"}, lambda f: f.assign(qid="q1")),
    "empty frame": (set(), lambda f: f.iloc[:0]),
}
#: what each case must give: an error matching a pattern, or the answer on the clean frame (see `test_frames`)
REFUSED = {
    "None query": r"missing query \(None/NaN\) for qid 'q2'",
    "NaN query": r"missing query \(None/NaN\) for qid 'q2'",
    "None text": r"missing text \(None/NaN\) for docno 'd1'",
    "NaN text": r"missing text \(None/NaN\) for docno 'd1'",
    "one qid two queries": r"qid 'q1' has 2 different query texts",
}
OUTPUTS = {"results": ["score", "rank"], "topics": ["docno", "score", "rank"], "queries": [], "docs": []}


def frame_cells():
    for stage, (kind, _) in STAGES.items():
        columns = set(clean_frame(kind).columns)
        for case, (needs, _) in CASES.items():
            if needs <= columns:
                yield pytest.param(stage, case, id=f"{stage}-{case}")


def comparable(out: pd.DataFrame, kind: str) -> pd.DataFrame:
    """The output with ids as the clean frame's ``str`` ids, in a fixed row order."""
    out = out.copy()
    back = {"qid": {}, "docno": {}}
    for clean in [*QUERIES["qid"], *RESULTS["qid"]]:
        back["qid"].update({SPACED["qid"](clean): clean, str(int(clean[1:])): clean})
    for clean in [d["docno"] for d in DOCS]:
        back["docno"].update({SPACED["docno"](clean): clean, str(int(clean[1:])): clean})
    for column in ("qid", "docno"):
        if column in out:
            out[column] = [back[column].get(str(v), str(v)) for v in out[column]]
    keys = {"results": ["qid", "docno"], "topics": ["qid", "rank"], "queries": ["qid"], "docs": ["docno"]}[kind]
    return out.sort_values(keys, kind="stable").reset_index(drop=True)


@pytest.mark.parametrize(("stage", "case"), list(frame_cells()))
def test_frames(models, indexes, stage, case):
    kind, make = STAGES[stage]
    transformer = make(models, indexes)
    clean = clean_frame(kind)
    bad = CASES[case][1](clean)
    if case in REFUSED:
        with pytest.raises(ValueError, match=REFUSED[case]):
            transformer(bad)
    elif case == "whitespace ids" and stage == "bm25":  # PISA's retriever gets the qids: refused by name
        with pytest.raises(ValueError, match=r"qid 'q \\n1' .*whitespace"):
            transformer(bad)
    elif case == "empty frame":
        out = transformer(bad)
        assert len(out) == 0 and set(OUTPUTS[kind]) <= set(out.columns)
    else:  # NUL = a space; whitespace / integer ids: the answer of the clean ids, the ids as given
        if case == "NUL byte":
            clean = bad.assign(**{c: bad[c].str.replace("\0", " ") for c in ("query", "text") if c in bad})
        out = transformer(bad)
        if case != "NUL byte":  # ids come back as given (BM25: as str)
            for column in {"qid", "docno"} & set(bad.columns):
                assert {str(i) for i in out[column]} <= {str(i) for i in bad[column]}, column
        assert_same_answer(comparable(out, kind), comparable(transformer(clean), kind))


# ------------------------------------------------------------------------------------------------------ index builds
def failing_corpus():
    for i, doc in enumerate(DOCS):
        if i == 3:
            raise RuntimeError("corpus broke")
        yield doc


BUILDS = {
    "None text": (lambda: [*DOCS, {"docno": "d9", "text": None}], r"missing text \(None/NaN\) for docno 'd9'"),
    "NaN text": (lambda: [*DOCS, {"docno": "d9", "text": math.nan}], r"missing text \(None/NaN\) for docno 'd9'"),
    "space in docno": (lambda: [*DOCS, {"docno": "d 9", "text": "x"}], r"docno 'd 9' .*whitespace"),
    "newline in docno": (lambda: [*DOCS[:2], {"docno": "d\n9", "text": "x"}, *DOCS[2:]], r"docno 'd\\n9' .*whitespace"),
    "missing docno": (lambda: [*DOCS, {"text": "x"}], r"missing docno"),
    "duplicate docno": (lambda: [*DOCS, {"docno": "d1", "text": "x"}], r"duplicate docno 'd1'"),
    "empty corpus": (lambda: [], r"corpus is empty"),
    "interrupted build": (failing_corpus, r"corpus broke"),
    "NUL byte": (lambda: [{**d, "text": d["text"].replace(" ", "\0")} for d in DOCS], None),
    "integer docnos": (lambda: [{**d, "docno": i} for i, d in enumerate(DOCS)], None),
    "one document": (lambda: DOCS[:1], None),
}


def run_of(retriever, queries=QUERIES) -> list[tuple[str, str]]:
    out = retriever(queries).sort_values(["qid", "rank"], kind="stable")
    return list(zip(out["qid"].astype(str), out["docno"].astype(str), strict=True))


@pytest.mark.parametrize("case", list(BUILDS))
@pytest.mark.parametrize("index_kind", list(INDEXES))
def test_index_builds(models, indexes, tmp_path, index_kind, case):
    build, retriever = INDEXES[index_kind]
    corpus, refused = BUILDS[case]
    path = tmp_path / "index"
    if refused:
        with pytest.raises((ValueError, KeyError, RuntimeError), match=refused):
            build(path, corpus(), models)
        assert list(tmp_path.iterdir()) == [], "nothing at the path, no staging folder"
        return
    build(path, corpus(), models)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]
    if case == "one document" and index_kind == "TITE>>FlexIndex":  # np_retriever: see test_dense_single_result_rows
        assert list(__import__("pyterrier_dr").FlexIndex(str(path)).docnos()) == ["d0"]
        return
    run = run_of(retriever(path, models))
    if case == "one document":
        assert run == [("q1", "d0"), ("q2", "d0")]
    elif case == "integer docnos":  # docnos as str, the ranking of the d-prefixed corpus
        assert run == [(q, d[1:]) for q, d in run_of(retriever(indexes[index_kind], models))]
    else:
        assert run == run_of(retriever(indexes[index_kind], models))


def test_dense_one_document_index_is_readable(models, tmp_path):
    """pyterrier_dr's own indexer fails on a 1-document corpus (npids cannot read back a block of one id); ours
    writes a docno store that reads back, as for an id whose form differs from the block of ids before it."""
    import pyterrier_dr

    for name, docs in {
        "one": DOCS[:1],
        "odd last id": [{"docno": f"doc-{i:03d}", "text": "hot"} for i in range(256)] + [{"docno": "x", "text": "a"}],
    }.items():
        index = pyterrier_dr.FlexIndex(str(tmp_path / name), verbose=False)
        (models["TITE"].doc_encoder() >> index).index(docs)
        assert list(index.docnos()) == [d["docno"] for d in docs] and len(index) == len(docs)
        vectors, _ = index.payload(return_docnos=False)
        assert_float_close(np.array(vectors[-1:]), models["TITE"].encode_docs([docs[-1]["text"]]))


def test_dense_single_result_rows(models, indexes):
    """pyterrier_dr's retrievers with one result per query (a 1-document index, or num_results=1) return
    array-valued docno / score cells (pyterrier_alpha's DataFrameBuilder keeps 1-element arrays as cells); ours
    (``index_retriever``, which ``t.load(index)``, ``retrieve`` and ``rerank --first-stage`` use) returns scalars."""
    from pyterrier_tite.pt.artifacts import index_retriever

    run = index_retriever(indexes["TITE>>FlexIndex"], 1, model=models["TITE"])(QUERIES)
    assert list(run["qid"]) == ["q1", "q2"] and all(isinstance(d, str) for d in run["docno"])
    assert run["score"].dtype.kind == "f"


def test_dense_build_into_an_existing_index(models, indexes, tmp_path):
    """``>> FlexIndex(path)`` never writes into an existing path; ``indexer(mode='overwrite')`` replaces it only once
    the new index is complete (an interrupted rebuild keeps the old one)."""
    import pyterrier_dr

    path = tmp_path / "index"
    shutil.copytree(indexes["TITE>>FlexIndex"], path)
    with pytest.raises(FileExistsError, match="already exists"):
        build_dense(path, DOCS, models)
    index = pyterrier_dr.FlexIndex(str(path), verbose=False)
    with pytest.raises(RuntimeError, match="corpus broke"):
        (models["TITE"] >> index.indexer(mode="overwrite")).index(failing_corpus())
    assert len(index) == len(DOCS) and sorted(p.name for p in tmp_path.iterdir()) == ["index"]
    (models["TITE"] >> index.indexer(mode="overwrite")).index(DOCS[:2])
    assert list(index.docnos()) == ["d0", "d1"]


# --------------------------------------------------------------------------------------------------- damaged indexes
def _truncate(name: str, keep: float = 0.5):
    def damage(folder: Path) -> None:
        for file in folder.glob(name):
            file.write_bytes(file.read_bytes()[: int(file.stat().st_size * keep)])

    return damage


#: damage -> (what it does, the file named by the error; None: the correct answer, the file rebuilt)
DAMAGES = {
    "intact": (lambda p: None, None),
    "missing fwd.doclex": (lambda p: (p / "fwd.doclex").unlink(), "fwd.doclex"),
    "missing pt_meta.json": (lambda p: (p / "pt_meta.json").unlink(), "pt_meta.json"),
    "truncated inv.docs": (_truncate("inv.docs"), "inv"),
    "truncated inv.freqs": (_truncate("inv.freqs"), "inv.freqs"),
    "truncated fwd.doclex": (_truncate("fwd.doclex", 0.9), "fwd.doclex"),
    "truncated fwd.termlex": (_truncate("fwd.termlex", 0.9), "fwd.termlex"),
    "fewer docnos in fwd.documents": (lambda p: (p / "fwd.documents").write_text("d0\n"), "fwd.documents"),
    "truncated compressed index": (_truncate("*.bmw.*.*"), None),
    "truncated block-max data": (_truncate("*.bmw.[0-9]*[0-9]"), None),
}
PISA_KINDS = ("bm25", "Splade.indexer")

OPEN_AND_RETRIEVE = """
import json, sys
import pandas as pd
import pyterrier_tite as t
from pyterrier_tite.store.pisa_files import CorruptIndexError
splade, cells = sys.argv[1], json.loads(sys.argv[2])
model = t.Splade.from_pretrained(splade, device="cpu") if any(k != "bm25" for k, _, _ in cells) else None
queries = pd.DataFrame({"qid": ["q1", "q2"], "query": ["hot plasma", "cold dense stars"]})
for kind, damage, path in cells:
    print(json.dumps([kind, damage, "started"]), flush=True)
    try:
        retriever = t.bm25("vaswani", path=path) if kind == "bm25" else model.retriever(path)
        run = retriever(queries).sort_values(["qid", "rank"], kind="stable")
        result = ["run", list(zip(run["qid"], run["docno"]))]
    except CorruptIndexError as exc:
        result = ["CorruptIndexError", str(exc)]
    except Exception as exc:
        result = [type(exc).__name__, str(exc)]
    print(json.dumps([kind, damage, result]), flush=True)
"""


def _sizes(folder: Path) -> dict[str, int]:
    return {f.name: f.stat().st_size for f in folder.iterdir() if f.is_file()}


@pytest.fixture(scope="module")
def damaged_pisa(models, indexes, tmp_path_factory) -> dict:
    """``(kind, damage) -> outcome`` of opening and querying each damaged copy, in subprocesses (PISA aborts or
    segfaults on damaged files): one process for all cells, restarted after one dies (that cell records the
    signal)."""
    folder = tmp_path_factory.mktemp("damaged")
    models["Splade"].save_pretrained(str(folder / "splade"))
    cells = []
    for kind in PISA_KINDS:
        run_of(INDEXES[kind][1](indexes[kind], models))  # PISA writes its compressed index and block-max data
        for damage, (apply, _) in DAMAGES.items():
            path = folder / f"{kind}-{damage.replace(' ', '_')}"
            shutil.copytree(indexes[kind], path)
            before = _sizes(path)
            apply(path)
            assert damage == "intact" or _sizes(path) != before, f"{damage} changed nothing in {kind}"
            cells.append((kind, damage, str(path)))
    outcomes: dict = {}
    while len(outcomes) < len(cells):
        todo = [c for c in cells if (c[0], c[1]) not in outcomes]
        done = subprocess.run(
            [sys.executable, "-c", OPEN_AND_RETRIEVE, str(folder / "splade"), json.dumps(todo)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        started = None
        for line in done.stdout.splitlines():
            kind, damage, result = json.loads(line)
            if result == "started":
                started = (kind, damage)
            else:
                outcomes[(kind, damage)], started = result, None
        if started is not None:  # the process died in this cell
            outcomes[started] = ["died", f"signal {-done.returncode}: {done.stderr[-500:]}"]
        elif done.returncode != 0:
            pytest.fail(f"the subprocess failed outside any cell: {done.stderr[-2000:]}")
    return outcomes


@pytest.mark.parametrize("damage", list(DAMAGES))
@pytest.mark.parametrize("kind", PISA_KINDS)
def test_damaged_pisa_indexes(models, indexes, damaged_pisa, kind, damage):
    outcome, detail = damaged_pisa[(kind, damage)]
    named = DAMAGES[damage][1]
    if named is None:  # intact, or a derived file PISA writes again
        assert outcome == "run", detail
        assert [tuple(r) for r in detail] == run_of(INDEXES[kind][1](indexes[kind], models))
    else:
        assert outcome == "CorruptIndexError" and named in detail, (outcome, detail)


#: pyterrier_dr's behaviour on a damaged FlexIndex (not ours to guard: its retrievers read the files): a Python
#: exception, the process survives; the files named where pyterrier_dr names them
FLEX_DAMAGES = {
    "missing vecs.f4": (lambda p: (p / "vecs.f4").unlink(), FileNotFoundError, "vecs.f4"),
    "truncated vecs.f4": (_truncate("vecs.f4"), ValueError, "mmap length"),
    "missing docnos.npids": (lambda p: (p / "docnos.npids").unlink(), FileNotFoundError, "docnos.npids"),
    "truncated docnos.npids": (_truncate("docnos.npids", 0.1), Exception, None),
    "missing pt_meta.json": (lambda p: (p / "pt_meta.json").unlink(), FileNotFoundError, "pt_meta.json"),
    "garbage pt_meta.json": (lambda p: (p / "pt_meta.json").write_text("{not json"), ValueError, None),
}


@pytest.mark.parametrize("damage", list(FLEX_DAMAGES))
def test_damaged_flex_index_is_a_python_error(models, indexes, tmp_path, damage):
    apply, error, message = FLEX_DAMAGES[damage]
    path = tmp_path / "index"
    shutil.copytree(indexes["TITE>>FlexIndex"], path)
    apply(path)
    with pytest.raises(error, match=message):
        INDEXES["TITE>>FlexIndex"][1](path, models)(QUERIES)


# ------------------------------------------------------------------------------------------------ checkpoint folders
def _loader(name: str):
    import pyterrier_tite as t

    if name == "load":
        return lambda path: t.load(path, device="cpu")
    return lambda path: getattr(t, name).from_pretrained(path, device="cpu")


@pytest.fixture(scope="module")
def checkpoints(models, tmp_path_factory) -> dict[str, Path]:
    """A loadable folder per loader: a hub snapshot, or (MonoCE, CELI: no released layout among the fixtures) a
    saved model."""
    folder = tmp_path_factory.mktemp("checkpoints")
    out = {}
    for name, repo in {
        "SparseCE": "webis/sparse-cross-encoder-4-4096",
        "TITE": "webis/tite-2-late-msmarco",
        "BertBiEncoder": "naver/efficient-splade-V-large-query",
        "Aggretriever": "castorini/aggretriever-cocondenser",
        "Splade": "naver/splade-cocondenser-ensembledistil",
        "load": "webis/tite-2-late-msmarco",
        "bert": "naver/splade-cocondenser-ensembledistil",
    }.items():
        out[name] = folder / name
        shutil.copytree(snapshot(repo), out[name])
    for name in ("MonoCE", "CELI"):
        out[name] = folder / name
        models[name].save_pretrained(str(out[name]))
    return out


def _drop_a_tensor(folder: Path) -> str:
    from safetensors.torch import save_file

    from pyterrier_tite.models.checkpoint import read_state_dict

    state = read_state_dict(folder)
    dropped = sorted(k for k in state if k.endswith("orm.weight"))[0]  # a LayerNorm: named alike in every layout
    del state[dropped]
    for name in ("pytorch_model.bin", "model.safetensors"):
        (folder / name).unlink(missing_ok=True)
    save_file({k: v.clone().contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    return re.escape(".".join(dropped.split(".")[-2:]))  # loaders may rename the prefix


LOADERS = ["SparseCE", "MonoCE", "CELI", "TITE", "BertBiEncoder", "Aggretriever", "Splade", "load"]
FOLDER_CASES = [
    "garbage config.json",
    "garbage pt_meta.json",
    "missing tensor",
    "BERT folder",
    "missing relative path",
    "uncached hub id",
    "a file",
]
#: BERT (MLM) folder given to each loader: None = loads (a new score head says so in a warning where it is new)
BERT_FOLDER = {"TITE": "not a TITE checkpoint: model_type 'bert'", "Aggretriever": "has no Aggretriever heads"}


@pytest.mark.parametrize("case", FOLDER_CASES)
@pytest.mark.parametrize("loader", LOADERS)
def test_checkpoint_folders(checkpoints, tmp_path, loader, case):
    from pyterrier_tite.models.checkpoint import CheckpointError

    load = _loader(loader)
    folder = tmp_path / "model"
    shutil.copytree(checkpoints[loader if case != "BERT folder" else "bert"], folder)
    if case in ("garbage config.json", "garbage pt_meta.json"):
        file = case.split()[-1]
        (folder / file).write_text("{not json")
        with pytest.raises(ValueError, match=rf"{re.escape(str(folder / file))} is not valid JSON"):
            load(str(folder))
    elif case == "missing tensor":
        part = _drop_a_tensor(folder)
        with pytest.raises(CheckpointError, match=rf"missing from the checkpoint: \S*{part}"):
            load(str(folder))
    elif case == "BERT folder":
        if loader in BERT_FOLDER:
            with pytest.raises(CheckpointError, match=BERT_FOLDER[loader]):
                load(str(folder))
        elif loader in ("SparseCE", "MonoCE", "CELI"):
            with pytest.warns(UserWarning, match="new weights"):
                load(str(folder))
        else:  # a BERT encoder is what BertBiEncoder pools; an MLM is a SPLADE model (t.load says Splade)
            assert type(load(str(folder))).__name__ == ("Splade" if loader == "load" else loader)
    else:
        path = {"missing relative path": "./nope", "uncached hub id": "webis/no-such-model"}.get(
            case, str(folder / "config.json")
        )
        start = time.perf_counter()
        with pytest.raises((FileNotFoundError, NotADirectoryError), match=path.rsplit("/", 1)[-1]):
            load(path)
        assert time.perf_counter() - start < 5, "fails at once, without hub retries"
