"""``pyterrier-tite evaluate``: score run files against qrels in one table (significance through ``pt.Experiment``)."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys

from pyterrier_tite.cli.batch import command

DEFAULT_MEASURES = "nDCG@10 AP R@100"
#: spaces or commas between measures, but not a comma before a number (trec_eval's ``ndcg_cut.10,20``) nor inside a
#: measure's parameters (``P(rel=2,judged_only=True)@10``)
MEASURE_SEPARATOR = re.compile(r"(?:\s+|,(?!\d))(?![^(]*\))")
#: multiple-testing corrections (statsmodels' ``multipletests`` methods, as ``pt.Experiment`` takes them)
CORRECTIONS = (
    "bonferroni", "sidak", "holm-sidak", "holm", "simes-hochberg", "hommel",
    "fdr_bh", "fdr_by", "fdr_tsbh", "fdr_tsbky",
)  # fmt: skip


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "evaluate",
        help="evaluate TREC run files against qrels (one table; significance with --baseline)",
        description="Evaluate run files against qrels. Example: pyterrier-tite evaluate --qrels vaswani bm25.run "
        "tite.run --baseline 0",
    )
    parser.add_argument("runs", nargs="+", help="TREC run files (.gz allowed)")
    parser.add_argument("--qrels", required=True, help="ir_datasets id / alias (e.g. vaswani, dl19) or a qrels file")
    parser.add_argument("--measures", default=DEFAULT_MEASURES, help="measures, spaces or commas between, named as in "
                        "ir_measures or trec_eval (nDCG@10 or ndcg_cut_10, AP or map, RR or recip_rank, P@10 or P_10); "
                        f"the columns follow this order (default {DEFAULT_MEASURES!r})")  # fmt: skip
    parser.add_argument("--names", default=None, help="comma-separated system names (default: the file names)")
    parser.add_argument("--baseline", type=int, default=None, help="index of the run to test the others against")
    parser.add_argument(
        "--correction", default=None, metavar="NAME",
        help=f"multiple-testing correction of the p-values against --baseline: {', '.join(CORRECTIONS)}",
    )  # fmt: skip
    parser.add_argument("--csv", default=None, help="also write the table as CSV")
    parser.add_argument("--json", default=None, help="also write the table as JSON records")
    parser.set_defaults(func=run_evaluate)


@command("evaluate")
def run_evaluate(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.names.split(",")] if args.names else [os.path.basename(p) for p in args.runs]
    if len(names) != len(args.runs):
        raise ValueError(f"--names gives {len(names)} names for {len(args.runs)} runs")
    table = evaluate(
        args.runs, args.qrels, MEASURE_SEPARATOR.split(args.measures), names=names, baseline=args.baseline,
        correction=args.correction,
    )  # fmt: skip
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_columns", None, "display.float_format", "{:.4f}".format):
        print(table.to_string(index=False))
    if args.csv:
        table.to_csv(args.csv, index=False)
    if args.json:
        table.to_json(args.json, orient="records", indent=1)
    return 0


def evaluate(runs: list[str], qrels: str, measures: list[str], names: list[str], baseline=None, correction=None):
    """``pt.Experiment`` over the runs on the queries of the qrels, every argument checked before any file is read
    (the measures average over every query of the qrels: one without results scores 0)."""
    import pandas as pd
    import pyterrier as pt

    from pyterrier_tite.store.runs import load_qrels, read_trec_run

    parsed = list(dict.fromkeys(m for name in measures if name for m in parse_measures(name)))
    if baseline is not None and not 0 <= baseline < len(runs):
        raise ValueError(f"--baseline {baseline} is not the index of one of the {len(runs)} runs")
    if correction is not None:
        from statsmodels.stats.multitest import multitest_alias  # every name pt.Experiment's multipletests takes

        if correction.lower() not in multitest_alias:
            raise ValueError(f"--correction {correction!r} is not a multiple-testing correction; use one of "
                             f"{', '.join(CORRECTIONS)}")  # fmt: skip
        if baseline is None:
            raise ValueError(
                f"--correction {correction} corrects the p-values of tests against a baseline: add --baseline"
            )
    judged = load_qrels(qrels)
    systems = [read_trec_run(path) for path in runs]
    for path, run in zip(runs, systems, strict=True):
        check_run(path, run, judged, qrels)
    topics = pd.DataFrame({"qid": sorted(judged["qid"].unique()), "query": ""})
    table = pt.Experiment(
        systems, topics, judged, parsed, names=names, baseline=baseline, correction=correction, round=4
    )
    order = {str(m): i for i, m in enumerate(parsed)}  # pt.Experiment sorts them by name: the order asked instead
    return table[sorted(table.columns, key=lambda c: (" " in c, order.get(c.split(" ")[0], -1)))]


def parse_measures(name: str) -> list:
    """The measures one name means, as ir_measures (``nDCG@10``) or trec_eval (``ndcg_cut.10,20``) writes it."""
    import ir_measures

    for parse in (lambda text: [ir_measures.parse_measure(text)], ir_measures.parse_trec_measure):
        with contextlib.suppress(ValueError, NameError, SyntaxError, KeyError):
            return list(parse(name))
    raise ValueError(f"unknown measure {name!r}: an ir_measures name (nDCG@10) or a trec_eval one (ndcg_cut_10)")


def check_run(path: str, run, judged, qrels: str) -> None:
    """Refuse a run that cannot belong to the qrels, where other tools print a row of zeros (another collection,
    swapped qid and docno columns, none of the queries); a run covering part of them: a line on stderr."""
    from pyterrier_tite.datasets import collection_id, same_documents
    from pyterrier_tite.store.runs import run_collection

    recorded = run_collection(path)
    if not same_documents(collection_id(recorded), collection_id(qrels)):
        raise ValueError(f"the run {path} ranks documents of {recorded} ({path}.meta.json), the qrels are {qrels}'s: "
                         f"evaluate it with --qrels {recorded}")  # fmt: skip
    if recorded is None and collection_id(qrels) is not None:
        check_run_documents(path, run, qrels)
    judged_qids = set(judged["qid"])
    qids, docnos = set(run["qid"]), set(run["docno"])
    covered = len(qids & judged_qids)
    if len(docnos & judged_qids) >= 0.9 * len(docnos) and covered < 0.5 * len(qids):
        raise ValueError(f"the run {path}: its docnos are the qrels' query ids and its qids are not: the qid and "
                         "docno columns look swapped; a TREC run line is `qid Q0 docno rank score system`")  # fmt: skip
    if covered == 0:
        example = sorted(qids)[0]
        raise ValueError(f"the run {path}: none of its {len(qids)} queries (e.g. {example!r}) are in the qrels "
                         f"{qrels}: is --qrels the run's collection?")  # fmt: skip
    total = len(judged_qids)
    if covered < total:
        print(f"pyterrier-tite evaluate: run {path}: {covered} of {total} queries of the qrels (the measures average "
              f"over all {total}; a query without results scores 0)", file=sys.stderr)  # fmt: skip


#: how many of a run's distinct docnos are looked up in the qrels' collection (spread over the sorted docnos)
DOCNO_SAMPLE = 1000


def check_run_documents(path: str, run, qrels: str, sample: int = DOCNO_SAMPLE) -> None:
    """Look ``sample`` docnos of a run up in the qrels' collection: most missing is a run of another collection
    (vaswani and cranfield share their qids, so nothing else tells them apart); a few: one line on stderr."""
    from pyterrier_tite.store.corpus import DocumentTexts

    docnos = sorted(set(run["docno"]))
    step = max(1, len(docnos) // sample)
    asked = docnos[::step][:sample]
    missing = DocumentTexts(qrels).missing(asked)
    if not missing:
        return
    what = f"{len(missing)} of {len(asked)} docnos looked up in the run {path} are not documents of {qrels} " \
           f"(e.g. {missing[0]!r})"  # fmt: skip
    if 2 * len(missing) > len(asked):
        raise ValueError(f"{what}: is --qrels the run's collection?")
    print(f"pyterrier-tite evaluate: {what}", file=sys.stderr)
