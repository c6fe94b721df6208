"""``pyterrier-tite evaluate`` end to end, as a user types it: run files against a qrels file or an ir_datasets id."""

from __future__ import annotations

import json

import pytest
from _cli import cli_here

QRELS = "1 0 a 1\n1 0 b 0\n2 0 c 2\n2 0 d 1\n3 0 e 1\n"
GOOD = "1 Q0 a 1 3.0 good\n1 Q0 b 2 2.0 good\n2 Q0 c 1 3.0 good\n2 Q0 d 2 1.0 good\n3 Q0 e 1 1.0 good\n"
BAD = "1 Q0 b 1 3.0 bad\n1 Q0 a 2 2.0 bad\n2 Q0 d 1 3.0 bad\n2 Q0 c 2 1.0 bad\n3 Q0 x 1 1.0 bad\n"


def test_evaluate_files_with_significance(tmp_path):
    (tmp_path / "qrels.txt").write_text(QRELS)
    (tmp_path / "good.run").write_text(GOOD)
    (tmp_path / "bad.run").write_text(BAD)
    done = cli_here(
        "evaluate", str(tmp_path / "good.run"), str(tmp_path / "bad.run"), "--qrels", str(tmp_path / "qrels.txt"),
        "--measures", "nDCG@10 P@1", "--baseline", "0", "--correction", "holm", "--json", str(tmp_path / "t.json"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "good.run" in done.stdout and "bad.run" in done.stdout
    rows = {r["name"]: r for r in json.load(open(tmp_path / "t.json"))}
    assert rows["good.run"]["nDCG@10"] == pytest.approx(1.0)
    assert rows["bad.run"]["P@1"] == pytest.approx(1 / 3, abs=1e-4)  # only query 2 has a relevant first document
    assert "P@1 p-value" in rows["bad.run"]


def test_evaluate_takes_trec_eval_names_and_commas_and_keeps_the_order_asked(tmp_path):
    """``--measures`` as a pt.Experiment user writes them: trec_eval names, commas or spaces (trec_eval's own
    ``ndcg_cut.5,10`` stays one name); the columns come in the order asked, the tests' columns too."""
    (tmp_path / "qrels.txt").write_text(QRELS)
    (tmp_path / "good.run").write_text(GOOD)
    (tmp_path / "bad.run").write_text(BAD)
    done = cli_here(
        "evaluate", str(tmp_path / "good.run"), str(tmp_path / "bad.run"), "--qrels", str(tmp_path / "qrels.txt"),
        "--measures", "P_1,ndcg_cut.5,10 map, recip_rank", "--baseline", "0", "--json", str(tmp_path / "t.json"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    asked = ["P@1", "nDCG@5", "nDCG@10", "AP", "RR"]
    assert done.stdout.split()[:6] == ["name", *asked]
    rows = json.load(open(tmp_path / "t.json"))
    assert [c for c in rows[1] if c.endswith("p-value")] == [f"{m} p-value" for m in asked]
    assert rows[1]["P@1"] == pytest.approx(1 / 3, abs=1e-4) and rows[1]["AP"] == pytest.approx(0.5)
    done = cli_here("evaluate", str(tmp_path / "good.run"), "--qrels", str(tmp_path / "qrels.txt"), "--measures",
                    "AP,AP map")  # fmt: skip
    assert done.returncode == 0 and done.stdout.split()[:3] == ["name", "AP", "good.run"], done.stdout


def test_evaluate_refuses_an_unknown_measure_and_a_bad_baseline(tmp_path):
    (tmp_path / "qrels.txt").write_text(QRELS)
    (tmp_path / "good.run").write_text(GOOD)
    qrels = str(tmp_path / "qrels.txt")
    done = cli_here("evaluate", str(tmp_path / "good.run"), "--qrels", qrels, "--measures", "nDGC@10")
    assert done.returncode == 2 and "unknown measure 'nDGC@10'" in done.stderr
    done = cli_here("evaluate", str(tmp_path / "good.run"), "--qrels", str(tmp_path / "qrels.txt"), "--baseline", "3")
    assert done.returncode != 0 and "--baseline 3" in done.stderr


@pytest.mark.slow
def test_evaluate_against_an_ir_datasets_id(tmp_path, irds_home, tite_cache):
    import pyterrier_tite as t
    from pyterrier_tite.store.runs import write_trec_run

    topics = t.datasets.get_dataset("vaswani").get_topics()
    write_trec_run(t.bm25("vaswani").transform(topics), tmp_path / "bm25.run.gz", system="bm25")
    done = cli_here("evaluate", str(tmp_path / "bm25.run.gz"), "--qrels", "vaswani", "--csv", str(tmp_path / "t.csv"))
    assert done.returncode == 0, done.stderr
    assert "0.4667" in (tmp_path / "t.csv").read_text()  # nDCG@10 of BM25 on vaswani, as in the README


def test_evaluate_refuses_a_run_of_none_of_the_qrels_queries(tmp_path):
    qrels = tmp_path / "qrels.txt"
    qrels.write_text(QRELS)
    (tmp_path / "other.run").write_text("7 Q0 a 1 3.0 s\n8 Q0 c 1 3.0 s\n")
    done = cli_here("evaluate", str(tmp_path / "other.run"), "--qrels", str(qrels))
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert f"the run {tmp_path / 'other.run'}: none of its 2 queries (e.g. '7') are in the qrels" in done.stderr
    assert "is --qrels the run's collection?" in done.stderr and len(done.stderr.splitlines()) == 1


def test_evaluate_names_swapped_columns(tmp_path):
    (tmp_path / "qrels.txt").write_text(QRELS)
    (tmp_path / "swapped.run").write_text("a Q0 1 1 3.0 s\nb Q0 1 2 2.0 s\nc Q0 2 1 3.0 s\nd Q0 3 1 1.0 s\n")
    done = cli_here("evaluate", str(tmp_path / "swapped.run"), "--qrels", str(tmp_path / "qrels.txt"))
    assert done.returncode == 2 and "the qid and docno columns look swapped" in done.stderr, done.stderr


def test_evaluate_says_how_many_queries_of_the_qrels_a_run_covers(tmp_path):
    """Evaluation goes on over every query of the qrels (a query without results scores 0), and says so."""
    (tmp_path / "qrels.txt").write_text(QRELS)
    (tmp_path / "part.run").write_text(GOOD.split("2 Q0 c")[0])
    done = cli_here("evaluate", str(tmp_path / "part.run"), "--qrels", str(tmp_path / "qrels.txt"), "--measures",
                    "P@1", "--json", str(tmp_path / "t.json"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "part.run: 1 of 3 queries of the qrels" in done.stderr and "average over all 3" in done.stderr
    assert json.load(open(tmp_path / "t.json"))[0]["P@1"] == pytest.approx(1 / 3, abs=1e-4)
    assert "part.run" in done.stdout and "1 of 3" not in done.stdout  # the table alone on stdout


def test_evaluate_refuses_a_run_recorded_for_another_collection(tmp_path, irds_home):
    import pandas as pd

    from pyterrier_tite.store.runs import write_trec_run

    run = str(tmp_path / "vaswani.run")
    write_trec_run(pd.DataFrame({"qid": ["1", "2"], "docno": ["1", "2"], "score": [1.0, 1.0]}), run,
                   collection="vaswani")  # fmt: skip
    done = cli_here("evaluate", run, "--qrels", "cranfield")
    assert done.returncode == 2, done.stderr
    assert f"the run {run} ranks documents of vaswani ({run}.meta.json), the qrels are cranfield's" in done.stderr


def test_evaluate_refuses_a_run_of_another_collection_that_records_none(tmp_path, irds_home):
    """A vaswani run from elsewhere (no record beside it) against cranfield's qrels: the qids are shared (1..93), so
    only the docnos tell: most are not cranfield documents (1..1400). A run whose docnos all exist is evaluated."""
    lines = [f"{q} Q0 {d} {r} {100 - r} s\n" for q in (1, 2) for r, d in enumerate((11, 1500, 3000, 9000, 11000), 1)]
    (tmp_path / "vaswani.run").write_text("".join(lines))
    done = cli_here("evaluate", str(tmp_path / "vaswani.run"), "--qrels", "cranfield")
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert "4 of 5 docnos looked up in the run" in done.stderr and "not documents of cranfield" in done.stderr
    assert len([line for line in done.stderr.splitlines() if "pyterrier-tite" in line]) == 1  # ir_datasets logs too
    (tmp_path / "cranfield.run").write_text("".join(line.replace(" 1500 ", " 150 ") for line in lines[:2]))
    done = cli_here("evaluate", str(tmp_path / "cranfield.run"), "--qrels", "cranfield", "--measures", "P@1")
    assert done.returncode == 0, done.stderr
