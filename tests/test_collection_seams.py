"""No silently wrong number at the seams between collections, indexes, topics and runs (issue 80): where both sides
know their collection (an index's record, a run's ``.meta.json``, an ir_datasets ID), documents of one collection are
never ranked for, re-ranked with or judged by another; the refusal is one line (exit 2). Also: ``--device cuda``
on a torch without CUDA, and a local package file given as ``retrieve --index``.

Tiny BM25 indexes of six documents stand in for real ones: an index records the ir_datasets ID it was built from.
"""

from __future__ import annotations

import pytest
from _cli import cli_here
from test_bad_inputs_files import refused, write
from test_cli_batch import DOCS, TOPICS, run_lines

from pyterrier_tite.cli.service import build_index

pytestmark = pytest.mark.usefixtures("single_thread")


def bm25_index(path, corpus_name: str) -> str:
    """A BM25 index of :data:`DOCS` that says it holds the documents of ``corpus_name``."""
    docs = [{"docno": str(d["docno"]), "text": d["text"]} for d in DOCS]
    build_index("bm25", docs, path, corpus_name=corpus_name, verbose=False)
    return str(path)


def test_retrieve_refuses_topics_of_another_collection(tmp_path, irds_home):
    index = bm25_index(tmp_path / "vaswani.bm25", "vaswani")
    done = cli_here("retrieve", "--index", index, "--topics", "cranfield", "--output", str(tmp_path / "r.run"))
    refused(done, f"the index {index} holds the documents of vaswani, the topics are cranfield's")
    assert not (tmp_path / "r.run").exists()
    # the same corpus through another split or an alias is no mismatch; the run records the index's collection
    done = cli_here("retrieve", "--index", index, "--topics", "irds:vaswani", "--output", str(tmp_path / "v.run"), "-k",
                    "2", "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    from pyterrier_tite.store.runs import run_collection

    assert run_collection(tmp_path / "v.run") == "vaswani"
    # a side that does not know its collection: no check
    topics = write(tmp_path / "t.tsv", TOPICS)
    done = cli_here("retrieve", "--index", index, "--topics", topics, "--output", str(tmp_path / "f.run"), "--quiet")
    assert done.returncode == 0, done.stderr[-2000:]
    unknown = bm25_index(tmp_path / "file.bm25", str(tmp_path / "corpus.jsonl"))
    done = cli_here("retrieve", "--index", unknown, "--topics", "cranfield", "--output", str(tmp_path / "u.run"), "-k",
                    "1", "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def test_rerank_names_docnos_that_are_not_in_the_dataset(tmp_path, irds_home):
    """A run re-ranked with texts of another collection: the count and an example docno, before any model loads
    (the model named here is never loaded)."""
    topics = write(tmp_path / "t.tsv", "1\tcat on a mat\n")
    run = write(tmp_path / "x.run", "1 Q0 abc 1 3.0 s\n1 Q0 1 2 2.0 s\n1 Q0 xyz 3 1.0 s\n")
    done = cli_here("rerank", "--model", "no/such-model", "--topics", topics, "--run", run, "--dataset", "vaswani",
                    "--output", str(tmp_path / "o.run"))  # fmt: skip
    refused(done, f"2 of 3 docnos of the run {run} are not in the documents of vaswani (e.g. 'abc')",
            "is --dataset the run's collection?")  # fmt: skip
    corpus = write(tmp_path / "c.tsv", "1\tthe cat\n")
    done = cli_here("rerank", "--model", "no/such-model", "--topics", topics, "--run", run, "--dataset", corpus,
                    "--output", str(tmp_path / "o.run"))  # fmt: skip
    refused(done, f"2 of 3 docnos of the run {run} are not in the documents of {corpus} (e.g. 'abc')")


def test_rerank_refuses_a_run_recorded_for_another_collection(tmp_path, irds_home):
    import pandas as pd

    from pyterrier_tite.store.runs import write_trec_run

    run = str(tmp_path / "v.run")
    write_trec_run(pd.DataFrame({"qid": ["1"], "docno": ["1"], "score": [1.0]}), run, collection="vaswani")
    done = cli_here("rerank", "--model", "no/such-model", "--topics", "cranfield", "--run", run, "--output",
                    str(tmp_path / "o.run"))  # fmt: skip
    refused(done, f"the run {run} ranks documents of vaswani", "--dataset is cranfield")


def test_device_cuda_without_cuda_is_one_line(tmp_path):
    import torch

    from pyterrier_tite.devices import default_device

    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    topics = write(tmp_path / "t.tsv", TOPICS)
    index = bm25_index(tmp_path / "i.bm25", "corpus")
    for device in ("cuda", "cuda:1"):
        done = cli_here("retrieve", "--index", index, "--topics", topics, "--output", str(tmp_path / "r.run"),
                        "--device", device)  # fmt: skip
        refused(done, f"pyterrier-tite retrieve: error: --device {device}: this torch ({torch.__version__}) has no "
                "CUDA", "--device cpu")  # fmt: skip
    refused(cli_here("retrieve", "--index", index, "--topics", topics, "--output", str(tmp_path / "r.run"),
                     "--device", "gpu"), "--device gpu: not a torch device")  # fmt: skip
    with pytest.raises(ValueError, match=r"device='cuda': this torch .* has no CUDA"):
        default_device("cuda")
    assert default_device("cpu").type == "cpu"


def test_retrieve_from_a_local_package_file(tmp_path, monkeypatch):
    import pyterrier as pt

    monkeypatch.setenv("PYTERRIER_HOME", str(tmp_path / "pyterrier_home"))
    topics = write(tmp_path / "t.tsv", TOPICS)
    index = bm25_index(tmp_path / "i.bm25", "corpus")
    package = pt.Artifact.load(index).build_package(str(tmp_path / "i.tar.lz4"), verbose=False)
    runs = []
    for source in (index, package):
        out = tmp_path / f"{len(runs)}.run"
        done = cli_here("retrieve", "--index", source, "--topics", topics, "--output", str(out), "--quiet")
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(run_lines(out))
    assert runs[0] == runs[1] and runs[0]
    # a package rebuilt under the same name is unpacked afresh, never answered from the copy of the old one
    docs = [{"docno": "new", "text": "cat on a mat in a park with dogs"}]
    build_index("bm25", docs, tmp_path / "j.bm25", corpus_name="corpus", verbose=False)
    pt.Artifact.load(str(tmp_path / "j.bm25")).build_package(package, verbose=False)
    done = cli_here("retrieve", "--index", package, "--topics", topics, "--output", str(tmp_path / "new.run"),
                    "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert {line[2] for line in run_lines(tmp_path / "new.run")} == {"new"}


def test_approximate_search_of_a_pisa_index_is_refused_from_python_too(tmp_path):
    """``t.load(index, search='hnsw')`` on a BM25 (PISA) index: one line, not an exact search under another name."""
    import pyterrier_tite as t

    index = bm25_index(tmp_path / "vaswani.bm25", "vaswani")
    with pytest.raises(ValueError, match=r"search 'hnsw' is for dense indexes; .* is a BM25 \(PISA\) index"):
        t.load(index, search="hnsw")
    assert t.load(index, num_results=2) is not None  # exact: the index's own retriever
