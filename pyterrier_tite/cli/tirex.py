"""``pyterrier-tite tirex rerank | retrieve``: the entry points of a TIRA / TIREx code submission (docs/tirex.md).
Input and output folders come from TIRA's variables unless given; both write ``run.txt`` + ``ir-metadata.yml``
(measured by tirex-tracker when installed); no network once the model is cached, and no Java (BM25 is PISA)."""

from __future__ import annotations

import argparse
import os

from pyterrier_tite.cli import flags
from pyterrier_tite.cli.batch import command


def register(commands: argparse._SubParsersAction) -> None:
    tirex = commands.add_parser(
        "tirex",
        help="TIREx / TIRA submissions: re-rank or retrieve from $inputDataset into $outputDir/run.txt",
        description="Run a model on a TIREx input folder and write run.txt + ir-metadata.yml.",
    )
    actions = tirex.add_subparsers(dest="tirex_command", required=True)
    for name, help_text, k in (
        ("rerank", "re-rank rerank.jsonl(.gz) with a model (cross-encoder, bi-encoder or SPLADE)", 100),
        ("retrieve", "index documents.jsonl(.gz) and retrieve for queries.jsonl / queries.xml", 1000),
    ):
        parser = actions.add_parser(name, help=help_text, description=help_text)
        parser.add_argument("--model", required=True, help="hub id, model folder, shipped name (retrieve: also bm25)")
        parser.add_argument("--input", default=None, help="input folder (default $inputDataset / $TIRA_INPUT_DATASET)")
        parser.add_argument("--output-dir", default=None, help="output folder (default $outputDir / $TIRA_OUTPUT_DIR)")
        flags.rename(parser, {"--output": "--output-dir"})
        k_help = "candidates re-ranked per query" if name == "rerank" else "results per query"
        flags.add_depth_argument(parser, k, k_help)
        flags.add_runtime_arguments(parser, "an existing run.txt (TIRA gives an empty output folder)")
        parser.set_defaults(func=run_tirex_rerank if name == "rerank" else run_tirex_retrieve)


def _folders(args: argparse.Namespace):
    from pyterrier_tite.store.tira import INPUT_VARIABLES, OUTPUT_VARIABLES, tira_dir

    source = tira_dir(args.input, INPUT_VARIABLES, "input")
    if not source.is_dir():
        raise FileNotFoundError(f"the input folder {source} does not exist")
    return source, tira_dir(args.output_dir, OUTPUT_VARIABLES, "output")


@command("tirex rerank", writes=lambda args: _folders(args)[1] / "run.txt")
def run_tirex_rerank(args: argparse.Namespace) -> int:
    from pyterrier_tite.cli.service import load_model, rerank, system_name
    from pyterrier_tite.store.ir_metadata import tracked_run
    from pyterrier_tite.store.runs import top_k
    from pyterrier_tite.store.tira import read_rerank, write_tirex_output

    flags.apply_runtime_arguments(args)
    source, target = _folders(args)
    candidates = top_k(read_rerank(source), args.k)
    if args.model.lower() == "bm25":
        raise ValueError("bm25 cannot re-rank a TIREx input; use a neural --model")
    with tracked_run(system_name(args.model)) as record:  # tirex-tracker, when installed, measures the work
        _, model = load_model(args.model, **flags.model_options(args))
        scored = rerank(model, candidates[["qid", "query", "docno", "text"]], verbose=not args.quiet)
    metadata = {"task": "rerank", "model": args.model, "k": args.k, "input": str(source)}
    run_file = write_tirex_output(scored, target, system_name(args.model), metadata, record.tracked)
    print(f"{len(scored)} re-ranked results for {scored['qid'].nunique()} queries written to {run_file}")
    return 0


@command("tirex retrieve", writes=lambda args: _folders(args)[1] / "run.txt")
def run_tirex_retrieve(args: argparse.Namespace) -> int:
    import tempfile

    from pyterrier_tite.cli.service import build_index, index_retriever, load_model, retrieve, system_name
    from pyterrier_tite.store.ir_metadata import tracked_run
    from pyterrier_tite.store.tira import iter_documents, read_queries, write_tirex_output

    flags.apply_runtime_arguments(args)
    source, target = _folders(args)
    topics = read_queries(source)  # read first: a missing file is reported before any indexing
    threads = args.threads or 1
    scratch_folder = tempfile.TemporaryDirectory(prefix="pyterrier-tite-tirex-")
    with tracked_run(system_name(args.model)) as record, scratch_folder as scratch:  # tirex-tracker measures the work
        _, model = load_model(args.model, **flags.model_options(args))  # loaded once: indexing and retrieval share it
        index = os.path.join(scratch, "index")
        build_index(
            args.model, iter_documents(source), index, corpus_name=str(source), batch_size=args.batch_size,
            threads=threads, verbose=not args.quiet, model=model, package_model=False,  # a scratch index: no model copy
        )  # fmt: skip
        retriever = index_retriever(index, args.model, args.k, threads=threads, model=model)
        results = retrieve(retriever, topics, verbose=not args.quiet)
    metadata = {"task": "retrieve", "model": args.model, "k": args.k, "input": str(source)}
    run_file = write_tirex_output(results, target, system_name(args.model), metadata, record.tracked)
    print(f"{len(results)} results for {results['qid'].nunique()} of {len(topics)} queries written to {run_file}")
    return 0
