"""Run files and TIREx inputs/outputs: ids as strings, one line per pair, ranks from 1, atomic writes, TIRA's
formats (integer ids, gz, queries.xml) read back as PyTerrier frames."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from pyterrier_tite.store.runs import normalised_run, read_trec_run, write_trec_run
from pyterrier_tite.store.tira import iter_documents, read_queries, read_rerank, tira_dir, write_tirex_output

RESULTS = pd.DataFrame(
    {
        "qid": [2, 2, 2, 1, 1, 2],
        "docno": ["b", "a", "c", "ä1", "x", "a"],
        "score": [0.5, 0.9, 0.5, 3.0, 4.0, 0.1],
    }
)


def test_runs_are_normalised():
    run = normalised_run(RESULTS)
    assert run["qid"].tolist() == ["2", "2", "2", "1", "1"]  # queries in first-seen order, ids as str
    assert run["docno"].tolist() == ["a", "b", "c", "x", "ä1"]  # best score first, ties by docno, duplicate dropped
    assert run["rank"].tolist() == [1, 2, 3, 1, 2]
    assert run.loc[0, "score"] == 0.9  # the duplicate pair keeps its best score


@pytest.mark.parametrize("name", ["run.txt", "run.txt.gz"])
def test_written_runs_read_back(tmp_path, name):
    write_trec_run(RESULTS, tmp_path / name, system="tite")
    back = read_trec_run(tmp_path / name)
    assert back[["qid", "docno", "rank"]].values.tolist() == [
        ["2", "a", 1], ["2", "b", 2], ["2", "c", 3], ["1", "x", 1], ["1", "ä1", 2]
    ]  # fmt: skip
    assert set(back["name"]) == {"tite"} and [p.name for p in tmp_path.iterdir()] == [name]
    if name.endswith(".gz"):
        assert gzip.decompress((tmp_path / name).read_bytes()).startswith(b"2 Q0 a 1 0.9 tite\n")


@pytest.mark.parametrize(
    ("bad", "message"),
    [({"docno": "a b"}, "whitespace"), ({"qid": None}, "missing qid"), ({"score": float("nan")}, "missing score")],
)
def test_bad_rows_are_refused_and_nothing_is_written(tmp_path, bad, message):
    frame = pd.DataFrame([{"qid": "1", "docno": "d", "score": 1.0, **bad}])
    with pytest.raises(ValueError, match=message):
        write_trec_run(frame, tmp_path / "run.txt")
    assert list(tmp_path.iterdir()) == []


def write_jsonl(path, records, compress=False):
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    path.write_bytes(gzip.compress(data) if compress else data)


def test_tira_rerank_input_with_integer_ids(tmp_path):
    records = [
        {"qid": 1, "query": "plasma", "docno": 10, "text": "plasma waves", "rank": 1, "score": 9.0,
         "original_query": {"title": "plasma"}, "original_document": {}},
        {"qid": 1, "query": "plasma", "docno": "d2", "text": "", "rank": 2, "score": 8.0},
    ]  # fmt: skip
    write_jsonl(tmp_path / "rerank.jsonl.gz", records, compress=True)
    frame = read_rerank(tmp_path)
    assert frame[["qid", "docno", "text"]].values.tolist() == [["1", "10", "plasma waves"], ["1", "d2", ""]]


def test_tira_full_rank_inputs(tmp_path):
    write_jsonl(tmp_path / "corpus.jsonl.gz", [{"doc_id": 7, "default_text": "a doc"}], compress=True)
    write_jsonl(tmp_path / "queries.jsonl", [{"qid": 3, "query": "q"}])
    assert list(iter_documents(tmp_path)) == [{"docno": "7", "text": "a doc"}]
    assert read_queries(tmp_path).values.tolist() == [["3", "q"]]
    (tmp_path / "queries.jsonl").unlink()
    (tmp_path / "queries.xml").write_text(
        '<topics><topic number="5"><query>solar wind</query><description>d</description></topic></topics>'
    )
    assert read_queries(tmp_path).values.tolist() == [["5", "solar wind"]]


def test_tira_folders_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("inputDataset", raising=False)
    monkeypatch.setenv("TIRA_INPUT_DATASET", str(tmp_path))
    assert tira_dir(None, ("inputDataset", "TIRA_INPUT_DATASET"), "input") == tmp_path
    monkeypatch.delenv("TIRA_INPUT_DATASET")
    with pytest.raises(ValueError, match="inputDataset"):
        tira_dir(None, ("inputDataset", "TIRA_INPUT_DATASET"), "input")
    with pytest.raises(FileNotFoundError, match="rerank.jsonl"):
        read_rerank(tmp_path)


def test_tirex_output(tmp_path):
    frame = pd.concat([RESULTS.assign(qid=RESULTS["qid"] + 10 * i) for i in range(3)])
    run_file = write_tirex_output(frame, tmp_path / "out", "tite", {"model": "webis/x", "k": 10})
    back = read_trec_run(run_file)
    assert back["qid"].nunique() == 6 and not back.duplicated(["qid", "docno"]).any()
    meta = (tmp_path / "out" / "ir-metadata.yml").read_text()
    assert 'tag: "tite"' in meta and 'model: "webis/x"' in meta


def test_a_topics_tsv_with_the_header_pandas_writes(tmp_path):
    """``to_csv(sep="\\t", index=False)`` writes a ``qid<TAB>query`` header: it is no query named ``qid``; only a
    first line that is exactly that header is skipped."""
    from pyterrier_tite.store.topics import load_topics

    pd.DataFrame({"qid": ["1", "2"], "query": ["cats", "dogs"]}).to_csv(tmp_path / "t.tsv", sep="\t", index=False)
    assert load_topics(str(tmp_path / "t.tsv")).values.tolist() == [["1", "cats"], ["2", "dogs"]]
    (tmp_path / "u.tsv").write_text("1\tcats\nqid\tquery\n", encoding="utf-8")
    assert load_topics(str(tmp_path / "u.tsv"))["qid"].tolist() == ["1", "qid"]


def test_a_run_records_its_collection_beside_it(tmp_path):
    """``<run>.meta.json`` names the collection; the run stays plain TREC, and a run written again over it without a
    collection loses the old record (never another run's)."""
    from pyterrier_tite.store.runs import run_collection

    path = tmp_path / "run.txt.gz"
    write_trec_run(RESULTS, path, system="tite", collection="vaswani")
    assert run_collection(path) == "vaswani" and len(read_trec_run(path)) == 5
    assert json.loads((tmp_path / "run.txt.gz.meta.json").read_text()) == {"collection": "vaswani"}
    write_trec_run(RESULTS, path, system="tite")
    assert run_collection(path) is None and sorted(p.name for p in tmp_path.iterdir()) == ["run.txt.gz"]
    (tmp_path / "run.txt.gz.meta.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"run\.txt\.gz\.meta\.json is no run record"):
        run_collection(path)
