"""Nothing lost under faults, round two (issue 64, classes 6 and 7): the files a user hands to the batch commands.

Each cell asserts the contracted outcome: the exact answer, or a ``ValueError`` (a one-line CLI error, exit 2) that
names the file, the line and the offending id / value and says what the format is. The matrix:

- **topics files** (``.tsv``, TREC ``<top>``, TREC XML / TIREx ``queries.xml``, ``.jsonl``): TSV queries are kept
  exactly (a leading, unbalanced or balanced double quote is text, not CSV quoting; no line merged or dropped); a line
  with three fields or no tab names the line and ``qid<TAB>query``; ``<num> Number: 001`` is qid ``001`` (only the
  label is stripped, as ir_datasets does); ``NA`` / ``null`` / ``None`` ids stay strings everywhere; an XML file
  without ``<topic>`` / ``<query>`` or not well formed, an empty topics file and a JSONL record without qid name
  the file (and line).
- **JSONL values** (corpus, topics, TIREx ``rerank.jsonl``): a list / object / boolean / float as docno, qid, text or
  query names file, line and field; integer ids become ``str``.
- **corpora**: a TSV line without a tab names the line; a docno twice in a corpus file is refused by ``rerank
  --dataset`` (``DocumentTexts``) as by ``index``.
- **run files** (``read_trec_run``, into ``evaluate`` and ``rerank``): a duplicate (qid, docno) is refused with the
  count and the first example's line (``rerank`` warns and keeps each pair once); a ``nan`` or non-numeric score, a
  5-column line (no ``Q0``) and an empty file name file and line. ``top_k`` (``rerank -k``) cuts by score, ties by
  rank, then file order, so a run whose ranks are all 1 keeps its best-scored documents.
- **qrels**: a document judged twice with different grades is refused naming both grades; identical duplicate
  lines warn with the count and count once; 3-column lines, non-integer grades and an empty file name the file.
- **evaluate**: an unknown ``--correction`` (or one without ``--baseline``) is refused before any evaluation runs.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pandas as pd
import pytest
from _cli import cli_here

from pyterrier_tite.store.corpus import DocumentTexts, iter_corpus
from pyterrier_tite.store.runs import load_qrels, read_trec_run, top_k
from pyterrier_tite.store.tira import read_queries, read_rerank
from pyterrier_tite.store.topics import load_topics

QRELS = "1 0 a 1\n1 0 b 0\n2 0 c 2\n"
RUN = "1 Q0 a 1 3.0 s\n1 Q0 b 2 2.0 s\n2 Q0 c 1 3.0 s\n"


def write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return str(path)


def write_jsonl(path, records: list) -> str:
    return write(path, "".join(json.dumps(r) + "\n" for r in records))


def refused(done: subprocess.CompletedProcess, *parts: str) -> None:
    """Exit 2 with one error line holding every part (and no traceback)."""
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = [line for line in done.stderr.splitlines() if "error:" in line]
    assert lines and "Traceback" not in done.stderr, done.stderr[-2000:]
    for part in parts:
        assert part in lines[-1], (part, lines[-1])


# --------------------------------------------------------------------------------------------------------- topics TSV
@pytest.mark.parametrize(
    "query",
    ['"hello world', 'say "hi there', '"exact phrase"', '"a" b "c', "it's 'quoted'", 'x "', '""'],
    ids=["leading", "unbalanced", "balanced", "mixed", "single", "trailing", "empty-pair"],
)
def test_tsv_topics_keep_quotes_and_every_line(tmp_path, query):
    path = write(tmp_path / "t.tsv", f"1\t{query}\n2\tsecond query\n3\tthird\n")
    topics = load_topics(path)
    assert topics.values.tolist() == [["1", query], ["2", "second query"], ["3", "third"]]


def test_tsv_topics_keep_the_text_exactly(tmp_path):
    path = write(tmp_path / "t.tsv", "a1\t  two  spaces \\t ok  \nNA\tnull\nnull\tNone\n")
    topics = load_topics(path)
    assert topics.values.tolist() == [["a1", "  two  spaces \\t ok  "], ["NA", "null"], ["null", "None"]]


@pytest.mark.parametrize(
    "text, line",
    [("1\tfine\n2\ta\tb\n", 2), ("1\tfine\n\n2 no tab\n", 3)],
    ids=["three-fields", "no-tab"],
)
def test_tsv_topics_name_a_bad_line(tmp_path, text, line):
    path = write(tmp_path / "t.tsv", text)
    with pytest.raises(ValueError, match=rf"t\.tsv, line {line}: .*qid<TAB>query"):
        load_topics(path)


def test_empty_topics_files_are_refused(tmp_path):
    for name, text in (("e.tsv", ""), ("e.jsonl", "\n"), ("e.txt", "nothing here\n")):
        with pytest.raises(ValueError, match=rf"{name}.*no (topics|queries|<top>)"):
            load_topics(write(tmp_path / name, text))


# ------------------------------------------------------------------------------------------------------- TREC topics
TREC_TOPICS = """<top>
<num> Number: 001
<title> Topic: solar wind

<desc> Description:
The flow of charged particles.
</top>

<top>
<num> 051
<title> airbus subsidies
on the
european market
</top>
<top> <num> Number: NA <title> null </top>
"""


def test_trec_topics_keep_leading_zeros(tmp_path):
    topics = load_topics(write(tmp_path / "topics.txt", TREC_TOPICS))
    assert topics.values.tolist() == [
        ["001", "solar wind"],
        ["051", "airbus subsidies on the european market"],
        ["NA", "null"],
    ]


def test_trec_topics_name_a_topic_without_num_or_title(tmp_path):
    path = write(tmp_path / "topics.txt", "<top>\n<num> 1\n<title> fine\n</top>\n\n<top>\n<title> lost\n</top>\n")
    with pytest.raises(ValueError, match=r"topics\.txt, line 6: .*<num>"):
        load_topics(path)
    path = write(tmp_path / "topics.txt", "<top>\n<num> 1\n<desc> no title\n</top>\n")
    with pytest.raises(ValueError, match=r"topics\.txt, line 1: .*'1'.*<title>"):
        load_topics(path)


# ----------------------------------------------------------------------------------------------- XML / queries.xml
def test_queries_xml_without_query_elements_is_refused(tmp_path):
    (tmp_path / "in").mkdir()
    xml = '<topics>\n<topic number="1"><query>fine</query></topic>\n<topic number="2">\n<title>x</title></topic>\n'
    write(tmp_path / "in" / "queries.xml", xml + "</topics>\n")
    with pytest.raises(ValueError, match=r"queries\.xml, line 3: topic '2' has no <query>"):
        read_queries(tmp_path / "in")
    write(tmp_path / "in" / "queries.xml", "<topics>\n</topics>\n")
    with pytest.raises(ValueError, match=r"queries\.xml: no <topic>"):
        read_queries(tmp_path / "in")
    write(tmp_path / "in" / "queries.xml", '<topics>\n<topic number="1"><query>a & b</query></topic>\n</topics>\n')
    with pytest.raises(ValueError, match=r"queries\.xml, line 2, column \d+: not well-formed XML"):
        read_queries(tmp_path / "in")


def test_queries_xml_ids_and_texts(tmp_path):
    xml = (
        '<topics><topic number="007"><query> solar  wind </query></topic>'
        "<topic><number>NA</number><query>a &amp; b</query></topic></topics>"
    )
    assert load_topics(write(tmp_path / "q.xml", xml)).values.tolist() == [["007", "solar  wind"], ["NA", "a & b"]]


def test_tirex_retrieve_refuses_queries_xml_without_queries(tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    write_jsonl(source / "documents.jsonl", [{"docno": "d1", "text": "solar wind"}])
    write(source / "queries.xml", '<topics><topic number="1"><title>solar</title></topic></topics>')
    done = cli_here("tirex", "retrieve", "--model", "bm25", "--input", str(source), "--output-dir", str(tmp_path / "o"))
    refused(done, "queries.xml", "topic '1' has no <query>")
    assert not (tmp_path / "o" / "run.txt").exists()


# ------------------------------------------------------------------------------------------------------ JSONL values
BAD_VALUES = [(["a", "b"], "list"), ({"a": 1}, "object"), (True, "boolean")]


@pytest.mark.parametrize("value, kind", BAD_VALUES, ids=[k for _, k in BAD_VALUES])
@pytest.mark.parametrize("name", ["docno", "text", "title", "default_text"])
def test_jsonl_corpus_refuses_non_scalar_values(tmp_path, name, value, kind):
    record = {"docno": "d2", "text": "fine", name: value}
    path = write_jsonl(tmp_path / "c.jsonl", [{"docno": "d1", "text": "ok"}, record])
    with pytest.raises(ValueError, match=rf"c\.jsonl, line 2: {name} is a JSON {kind}"):
        list(iter_corpus(path))


def test_jsonl_ids_integers_become_str_and_floats_are_refused(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"docno": 7, "text": 12}, {"docno": "NA", "text": "null"}])
    assert list(iter_corpus(path)) == [{"docno": "7", "text": "12"}, {"docno": "NA", "text": "null"}]
    path = write_jsonl(tmp_path / "c.jsonl", [{"docno": 7.5, "text": "x"}])
    with pytest.raises(ValueError, match=r"c\.jsonl, line 1: docno is a JSON number with a fraction"):
        list(iter_corpus(path))
    path = write_jsonl(tmp_path / "c.jsonl", [{"docno": "d1", "text": None}])
    with pytest.raises(ValueError, match=r"c\.jsonl, line 1: missing text"):
        list(iter_corpus(path))


@pytest.mark.parametrize("name", ["qid", "query"])
@pytest.mark.parametrize("value, kind", BAD_VALUES, ids=[k for _, k in BAD_VALUES])
def test_jsonl_topics_refuse_non_scalar_values(tmp_path, name, value, kind):
    path = write_jsonl(tmp_path / "q.jsonl", [{"qid": 1, "query": "ok"}, {"qid": 2, "query": "x", name: value}])
    with pytest.raises(ValueError, match=rf"q\.jsonl, line 2: {name} is a JSON {kind}"):
        load_topics(path)


def test_jsonl_topics_name_the_line_of_a_missing_field(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", [{"qid": 1, "query": "ok"}, {"id": 2, "query": "x"}])
    with pytest.raises(ValueError, match=r"q\.jsonl, line 2: .*qid / query_id"):
        load_topics(path)


@pytest.mark.parametrize("name", ["qid", "docno", "query", "text"])
def test_tirex_rerank_input_refuses_non_scalar_values(tmp_path, name):
    good = {"qid": 1, "query": "q", "docno": "a", "text": "t", "rank": 1, "score": 2.0}
    write_jsonl(tmp_path / "rerank.jsonl", [good, {**good, "docno": "b", name: ["x"]}])
    with pytest.raises(ValueError, match=rf"rerank\.jsonl, line 2: {name} is a JSON list"):
        read_rerank(tmp_path)
    write_jsonl(tmp_path / "rerank.jsonl", [good, {**good, "docno": "b", "score": "high"}])
    with pytest.raises(ValueError, match=r"rerank\.jsonl, line 2: score"):
        read_rerank(tmp_path)


# ----------------------------------------------------------------------------------------------------------- corpora
def test_tsv_corpus_names_a_line_without_tab(tmp_path):
    path = write(tmp_path / "c.tsv", "d1\tfine\n\nd2 no tab\n")
    with pytest.raises(ValueError, match=r"c\.tsv, line 3: .*docno<TAB>text"):
        list(iter_corpus(path))
    path = write(tmp_path / "c.tsv", 'NA\t"quoted\tand tab"\n')
    assert list(iter_corpus(path)) == [{"docno": "NA", "text": '"quoted\tand tab"'}]


def test_document_texts_refuse_a_docno_twice(tmp_path):
    docs = [{"docno": "d1", "text": "one"}, {"docno": "d2", "text": "two"}, {"docno": "d1", "text": "other"}]
    path = write_jsonl(tmp_path / "c.jsonl", docs)
    for wanted in (None, ["d1", "d2"]):
        with pytest.raises(ValueError, match=r"c\.jsonl, line 3: docno 'd1' appears twice \(first at line 1\)"):
            DocumentTexts(path, docnos=wanted)
    texts = DocumentTexts(path, docnos=["d2"])  # the duplicate plays no part
    assert len(texts.texts) == 1 and texts.add_text(pd.DataFrame({"docno": ["d2"]}))["text"].tolist() == ["two"]


def test_rerank_refuses_a_corpus_with_a_docno_twice(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"docno": "a", "text": "x"}, {"docno": "a", "text": "y"}])
    topics = write(tmp_path / "t.tsv", "1\tquery\n")
    run = write(tmp_path / "in.run", "1 Q0 a 1 1.0 s\n")
    done = cli_here("rerank", "--model", "webis/sparse-cross-encoder-4-4096", "--topics", topics, "--run", run,
                    "--dataset", corpus, "--output", str(tmp_path / "o.run"))  # fmt: skip
    refused(done, "c.jsonl, line 2", "docno 'a' appears twice")
    assert not (tmp_path / "o.run").exists()


# --------------------------------------------------------------------------------------------------------- run files
def test_runs_read_ids_as_given(tmp_path):
    path = tmp_path / "r.run.gz"
    path.write_bytes(gzip.compress(b"NA Q0 null 1 2.5 s\n\nNA Q0 None 2 -inf s\n001 Q0 nan 1 1 s\n"))
    run = read_trec_run(path)
    assert run[["qid", "docno", "rank"]].values.tolist() == [["NA", "null", 1], ["NA", "None", 2], ["001", "nan", 1]]
    assert run["score"].tolist() == [2.5, float("-inf"), 1.0]
    assert list(run.columns) == ["qid", "docno", "rank", "score", "name"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("1 Q0 a 1 3.0 s\n1 Q0 b 2 2.0 s\n1 Q0 a 3 1.0 s\n2 Q0 c 1 1 s\n2 Q0 c 1 1 s\n",
         r"r\.run: 2 duplicate \(qid, docno\) lines; the first: line 3, qid '1', docno 'a' \(also line 1\)"),
        ("1 Q0 a 1 3.0 s\n1 Q0 b 2 nan s\n", r"r\.run, line 2: score 'nan' .*qid '1', docno 'b'"),
        ("1 Q0 a 1 3.0 s\n1 Q0 b 2 high s\n", r"r\.run, line 2: score 'high' is not a number"),
        ("1 Q0 a 1.5 3.0 s\n", r"r\.run, line 1: rank '1.5' is not an integer"),
        ("1 a 1 3.0 s\n", r"r\.run, line 1: 5 fields; a TREC run line is `qid Q0 docno rank score system`.*Q0"),
        ("1 Q0 a 1 3.0 s extra\n", r"r\.run, line 1: 7 fields; a TREC run line is"),
        ("\n", r"r\.run: empty"),
    ],
    ids=["duplicates", "nan-score", "text-score", "float-rank", "no-Q0", "seven-fields", "empty"],
)  # fmt: skip
def test_bad_run_files_are_refused(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        read_trec_run(write(tmp_path / "r.run", text))


def test_rerank_warns_about_duplicate_run_lines(tmp_path):
    path = write(tmp_path / "r.run", "1 Q0 a 1 3.0 s\n1 Q0 a 2 1.0 s\n")
    with pytest.warns(UserWarning, match=r"r\.run: 1 duplicate \(qid, docno\) line;.*line 2"):
        run = read_trec_run(path, duplicates="warn")
    assert top_k(run, 10)[["docno", "score"]].values.tolist() == [["a", 3.0]]


def test_top_k_cuts_by_score_when_ranks_tie(tmp_path):
    """All ranks 1 (a run made by concatenation): the cut keeps the best scores, ties in file order."""
    run = read_trec_run(write(tmp_path / "r.run", "1 Q0 a 1 1.0 s\n1 Q0 b 1 5.0 s\n1 Q0 c 1 3.0 s\n1 Q0 d 1 5.0 s\n"))
    assert top_k(run, 3)["docno"].tolist() == ["b", "d", "c"]
    frame = pd.DataFrame({"qid": ["1"] * 3, "docno": ["a", "b", "c"], "rank": [3, 1, 2], "score": [0.0, 0.0, 0.0]})
    assert top_k(frame, 2)["docno"].tolist() == ["b", "c"]  # TIREx input without scores: ties broken by rank
    with pytest.raises(ValueError, match=r"score NaN for qid '1', docno 'b'"):
        top_k(frame.assign(score=[1.0, float("nan"), 0.0]), 2)


# ------------------------------------------------------------------------------------------------------------- qrels
def test_qrels_read_ids_as_given(tmp_path):
    qrels = load_qrels(write(tmp_path / "q.txt", "NA 0 null 1\n\nnull 0 None 2\n001 Q0 d -1\n"))
    expected = [["NA", "null", 1], ["null", "None", 2], ["001", "d", -1]]
    assert qrels[["qid", "docno", "label"]].values.tolist() == expected


def test_qrels_with_conflicting_grades_are_refused(tmp_path):
    path = write(tmp_path / "q.txt", QRELS + "1 0 a 2\n")
    with pytest.raises(ValueError, match=r"q\.txt, line 4: qid '1', docno 'a' is judged 2 here and 1 at line 1"):
        load_qrels(path)


def test_identical_duplicate_qrels_warn_and_count_once(tmp_path):
    path = write(tmp_path / "q.txt", QRELS + "1 0 a 1\n2 0 c 2\n")
    with pytest.warns(UserWarning, match=r"q\.txt: 2 duplicate judgement lines.*line 4"):
        qrels = load_qrels(path)
    assert len(qrels) == 3


@pytest.mark.parametrize(
    "text, message",
    [
        ("1 0 a 1\n1 a 1\n", r"q\.txt, line 2: 3 fields; a qrels line is `qid iteration docno label`"),
        ("1 0 a 1 extra\n", r"q\.txt, line 1: 5 fields; a qrels line is"),
        ("1 0 a high\n", r"q\.txt, line 1: label 'high' is not an integer"),
        ("1 0 a 1.5\n", r"q\.txt, line 1: label '1.5' is not an integer"),
        ("", r"q\.txt: empty"),
        ("\n\n", r"q\.txt: empty"),
    ],
    ids=["three-fields", "five-fields", "text-grade", "float-grade", "empty", "blank"],
)
def test_bad_qrels_files_are_refused(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        load_qrels(write(tmp_path / "q.txt", text))


# ---------------------------------------------------------------------------------------------------------- evaluate
def test_evaluate_refuses_bad_runs_and_qrels_by_name(tmp_path):
    qrels, good = write(tmp_path / "q.txt", QRELS), write(tmp_path / "good.run", RUN)
    dup = write(tmp_path / "dup.run", RUN + "1 Q0 a 3 0.5 s\n")
    refused(cli_here("evaluate", good, dup, "--qrels", qrels), "dup.run: 1 duplicate (qid, docno) line", "line 4")
    nan = write(tmp_path / "nan.run", RUN.replace("2.0", "nan"))
    refused(cli_here("evaluate", nan, "--qrels", qrels), "nan.run, line 2: score 'nan'")
    refused(cli_here("evaluate", good, "--qrels", write(tmp_path / "c.txt", QRELS + "2 0 c 0\n")), "c.txt, line 4")
    refused(cli_here("evaluate", good, "--qrels", write(tmp_path / "e.txt", "")), "e.txt: empty")
    refused(cli_here("evaluate", good, "--qrels", write(tmp_path / "three.txt", "1 a 1\n")), "three.txt, line 1")


@pytest.mark.parametrize("extra", [["--baseline", "0", "--correction", "holmes"], ["--correction", "holm"]])
def test_evaluate_checks_the_correction_before_evaluating(tmp_path, monkeypatch, extra):
    import pyterrier as pt

    def never(*args, **kwargs):
        raise AssertionError("pt.Experiment ran before the --correction check")

    monkeypatch.setattr(pt, "Experiment", never)
    runs = [write(tmp_path / "a.run", RUN), write(tmp_path / "b.run", RUN)]
    done = cli_here("evaluate", *runs, "--qrels", write(tmp_path / "q.txt", QRELS), *extra)
    assert done.returncode == 2 and "--correction" in done.stderr, done.stderr[-2000:]
    assert ("holmes" in done.stderr) if "holmes" in extra else ("--baseline" in done.stderr)


def test_evaluate_a_run_with_duplicates_fails_as_a_process(tmp_path):
    """As a user's script sees it: exit 2, one line naming the file, no traceback, no table."""
    qrels, dup = write(tmp_path / "q.txt", QRELS), write(tmp_path / "dup.run", RUN + RUN)
    done = subprocess.run([sys.executable, "-m", "pyterrier_tite", "evaluate", dup, "--qrels", qrels],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    refused(done, "dup.run: 3 duplicate (qid, docno) lines")
    assert done.stdout == ""


def test_texts_of_a_run_come_back_exactly_from_the_spill_file(tmp_path):
    """The texts a re-rank needs wait in a temporary file, not in memory: they come back byte for byte (non-ASCII,
    empty, a lone surrogate that JSON allows), and only the docnos asked for are kept."""
    texts = {"a": "naïve café 日本語 — “quoted”", "b": "", "c": "x" * 10_000, "d": "lone \ud800 surrogate", "e": "left"}
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"docno": d, "text": t}) + "\n" for d, t in texts.items()))
    kept = DocumentTexts(str(path), docnos=["d", "a", "c", "b"])
    assert len(kept.texts) == 4 and "e" not in kept.texts
    frame = kept.add_text(pd.DataFrame({"docno": ["c", "a", "d", "b", "a"]}))
    assert frame["text"].tolist() == [texts[d] for d in ["c", "a", "d", "b", "a"]]
