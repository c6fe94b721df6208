"""``pyterrier-tite index | retrieve | rerank``: batch indexing, retrieval and re-ranking from the shell."""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable

from pyterrier_tite.cli import flags


def command(name: str, writes: Callable[[argparse.Namespace], str | os.PathLike] | None = None):
    """Command ``name``'s function: any ``ValueError`` / ``KeyError`` too is a one-line user error; with ``writes``, it
    runs holding the write lock of ``writes(args)`` (rank 0 alone under ``torchrun``), so a target being written or
    not writable fails before any model is loaded, and an existing one unless ``--overwrite``."""

    def wrap(func):
        @functools.wraps(func)
        def run(args: argparse.Namespace) -> int:
            from pyterrier_tite.store.atomic import refuse_existing
            from pyterrier_tite.store.locks import write_lock

            if writes is None:
                return func(args)
            path = writes(args)
            refuse_existing(path, args.overwrite)
            if int(os.environ.get("RANK", "0")) != 0:
                return func(args)
            with write_lock(path):
                refuse_existing(path, args.overwrite)  # written by another process meanwhile
                return func(args)

        run.command_name = name
        return run

    return wrap


def register(commands: argparse._SubParsersAction) -> None:
    index = commands.add_parser(
        "index",
        help="index a collection with a dense model (FlexIndex), SPLADE or bm25 (PISA)",
        description="Index a collection. MODEL is a hub id, a saved folder, a shipped name (minilm) or bm25. Run "
        "under `torchrun --nproc_per_node N -m pyterrier_tite index ...` to encode on N processes.",
    )
    index.add_argument("--model", required=True, help="hub id, model folder, shipped name or bm25")
    index.add_argument(
        "--dataset", required=True,
        help="ir_datasets id / alias (vaswani, beir/scifact/test), a corpus .jsonl(.gz) / .tsv(.gz) file of docno + "
        "text, or a TIREx input folder (documents.jsonl)",
    )  # fmt: skip
    index.add_argument("--index", required=True, help="the index folder to create")
    flags.add_runtime_arguments(index, "an existing index (once the new one is done)")
    index.set_defaults(func=run_index)

    retrieve = commands.add_parser(
        "retrieve",
        help="retrieve from an index into a TREC run file",
        description="Retrieve the top k documents of each topic from an index built by `pyterrier-tite index`.",
    )
    retrieve.add_argument(
        "--index", required=True,
        help="index folder, or an index package: a URL (http(s)://.../index.tar.lz4, hf:org/name) or a local "
        ".tar.lz4 file, unpacked once into PyTerrier's artifact cache; the index brings its model",
    )  # fmt: skip
    retrieve.add_argument("--model", default=None, help="query encoder (default: the model that built the index)")
    retrieve.add_argument(
        "--search", choices=["exact", "hnsw", "ivf"], default="exact",
        help="dense indexes: exact reads every vector per query; switch to hnsw (FAISS graph) or ivf (FAISS "
        "clusters) when exact search is too slow, e.g. past a million documents, at the recall against exact that "
        "benchmarks/scale.py measures (it depends on the vectors); the FAISS index is built on first use and kept "
        "beside the index",
    )  # fmt: skip
    retrieve.add_argument(
        "--search-width", type=int, default=None,
        help="the recall / speed knob of approximate search: hnsw's candidate list (default: 128) or the clusters ivf "
        "searches per query (default: 32); wider finds more of the exact top k, slower",
    )  # fmt: skip
    add_run_arguments(retrieve, k=1000, k_help="results per query")
    flags.add_runtime_arguments(retrieve, "an existing run file")
    retrieve.set_defaults(func=run_retrieve)

    rerank = commands.add_parser(
        "rerank",
        help="re-rank a run (or a BM25 first stage) with a model into a TREC run file",
        description="Re-rank the top k of each query of a run file, or of BM25 over --dataset, with any model "
        "(cross-encoders, bi-encoders, SPLADE). Document texts come from --dataset (an ir_datasets id or a corpus "
        "file).",
    )
    rerank.add_argument("--model", required=True, help="hub id, model folder or shipped name")
    source = rerank.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="TREC run file to re-rank (.gz allowed)")
    source.add_argument(
        "--first-stage",
        help="bm25 (over the ir_datasets id --dataset), an index folder or an index package (URL or file)",
    )
    rerank.add_argument("--dataset", default=None, help="where texts come from: ir_datasets id or corpus file "
                        "(default: the collection of --topics when it is an ir_datasets id)")
    add_run_arguments(rerank, k=100, k_help="candidates re-ranked per query")
    flags.add_runtime_arguments(rerank, "an existing run file")
    rerank.set_defaults(func=run_rerank)


def add_run_arguments(parser: argparse.ArgumentParser, k: int, k_help: str) -> None:
    parser.add_argument("--topics", required=True, help="ir_datasets id / alias or a topics file (.jsonl/.tsv/.xml)")
    parser.add_argument("--output", required=True, help="run file to write (.gz compresses)")
    flags.rename(parser, {"--out": "--output"})
    flags.add_depth_argument(parser, k, k_help)


def _device_for_rank(device: str | None, world_size: int) -> str | None:
    """Under torchrun each rank takes its own GPU (``LOCAL_RANK``) unless a device index was given."""
    import torch

    if world_size <= 1 or not torch.cuda.is_available() or (device and device != "cuda"):
        return device
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    return f"cuda:{local}"


def corpus_documents(source: str):
    if os.path.isdir(source):
        from pyterrier_tite.store.tira import iter_documents

        return iter_documents(source)
    from pyterrier_tite.store.corpus import SizedCorpus, corpus_size, iter_corpus

    size = corpus_size(source)
    return iter_corpus(source) if size is None else SizedCorpus(iter_corpus(source), size)


@command("index", writes=lambda args: args.index)
def run_index(args: argparse.Namespace) -> int:
    from pyterrier_tite.cli.service import build_index
    from pyterrier_tite.training.loop import distributed_context, leave_process_group

    flags.apply_runtime_arguments(args)
    if not os.path.exists(args.dataset):  # an early, clear error for a corpus that is no file nor a known id
        from pyterrier_tite import datasets

        if args.dataset.endswith((".jsonl", ".jsonl.gz", ".tsv", ".tsv.gz", ".json")):
            raise FileNotFoundError(f"corpus file {args.dataset} does not exist")
        datasets.known_id(args.dataset)
    rank, world_size = distributed_context()
    device = _device_for_rank(args.device, world_size)
    completed = False
    try:
        kind = build_index(
            args.model, corpus_documents(args.dataset), args.index, corpus_name=args.dataset, device=device,
            batch_size=args.batch_size, precision=args.precision, threads=args.threads or 1, overwrite=args.overwrite,
            verbose=not args.quiet and rank == 0, rank=rank, world_size=world_size,
        )  # fmt: skip
        completed = True
    finally:
        if world_size > 1:
            leave_process_group(wait_for_others=completed)
    if rank == 0:
        print(f"{kind} index of {args.dataset} with {args.model} written to {args.index}")
    return 0


@command("retrieve", writes=lambda args: args.output)
def run_retrieve(args: argparse.Namespace) -> int:
    from pyterrier_tite.cli.service import system_name
    from pyterrier_tite.store.index_info import indexed_collection
    from pyterrier_tite.store.runs import write_trec_run
    from pyterrier_tite.store.topics import load_topics

    flags.apply_runtime_arguments(args)
    topics = load_topics(args.topics)
    options = {"hnsw": {"ef_search": args.search_width}, "ivf": {"n_probe": args.search_width}}.get(args.search, {})
    results, info = retrieve_from(args.index, args, topics, args.model, search=args.search, search_options=options)
    model = args.model or info.get("model_name") or info.get("model") or "bm25"
    written = write_trec_run(results, args.output, system=system_name(model), collection=indexed_collection(info))
    print(f"{len(written)} results for {written['qid'].nunique()} of {len(topics)} queries written to {args.output}")
    return 0


@command("rerank", writes=lambda args: args.output)
def run_rerank(args: argparse.Namespace) -> int:
    from pyterrier_tite.cli.service import attach_queries, load_model, rerank, system_name
    from pyterrier_tite.datasets import collection_id
    from pyterrier_tite.store.corpus import DocumentTexts
    from pyterrier_tite.store.runs import read_trec_run, top_k, write_trec_run
    from pyterrier_tite.store.text_files import is_file_argument
    from pyterrier_tite.store.topics import load_topics

    flags.apply_runtime_arguments(args)
    if args.dataset is None and not is_file_argument(args.topics):
        args.dataset = args.topics  # topics by ir_datasets id: the texts (and BM25) of their collection
    if args.model.lower() == "bm25":
        raise ValueError("bm25 is a first stage, not a re-ranker: use --first-stage bm25 with a neural --model")
    _check_collections(args)
    topics = load_topics(args.topics)
    if args.run is not None:
        if not os.path.isfile(args.run):
            raise FileNotFoundError(f"run file {args.run} does not exist")
        run = read_trec_run(args.run, duplicates="warn")  # top_k keeps each pair once
    else:
        run = _first_stage(args, topics)
    if args.dataset is None:
        raise ValueError("--dataset (an ir_datasets id or a corpus file) is needed for the document texts")
    candidates = attach_queries(top_k(run, args.k), topics)
    texts = DocumentTexts(args.dataset, docnos=candidates["docno"])
    docnos = candidates["docno"].unique()
    missing = texts.missing(docnos)
    if missing:
        source = f"run {args.run}" if args.run is not None else f"first stage {args.first_stage}"
        raise ValueError(f"{len(missing)} of {len(docnos)} docnos of the {source} are not in the documents of "
                         f"{args.dataset} (e.g. {missing[0]!r}): is --dataset the run's collection?")  # fmt: skip
    _, model = load_model(args.model, **flags.model_options(args))
    scored = rerank(model, candidates[["qid", "query", "docno"]], texts, verbose=not args.quiet)
    system, collection = system_name(args.model), collection_id(args.dataset)
    written = write_trec_run(scored, args.output, system=system, collection=collection)
    print(f"{len(written)} re-ranked results for {written['qid'].nunique()} queries written to {args.output}")
    return 0


def _check_collections(args: argparse.Namespace) -> None:
    """``--dataset`` is of the collection the run records (``<run>.meta.json``) and the topics name, if they do."""
    from pyterrier_tite.datasets import collection_id, same_documents
    from pyterrier_tite.store.runs import run_collection

    dataset = collection_id(args.dataset)
    recorded = run_collection(args.run) if args.run is not None and os.path.isfile(args.run) else None
    if not same_documents(collection_id(recorded), dataset):
        raise ValueError(f"the run {args.run} ranks documents of {recorded} ({args.run}.meta.json), but --dataset is "
                         f"{args.dataset}: pass --dataset {recorded}")  # fmt: skip
    topics = collection_id(args.topics)
    if not same_documents(topics, dataset):
        raise ValueError(f"the topics are {args.topics}'s but --dataset is {args.dataset}, another collection: pass "
                         f"--dataset {args.topics} (or topics of {args.dataset})")  # fmt: skip


def retrieve_from(index: str, args: argparse.Namespace, topics, model: str | None = None, **search):
    """``(run, index record)``: the top ``-k`` of ``topics`` from ``index`` (a folder or a package) with ``model``."""
    from pyterrier_tite.cli.service import check_topics_collection, index_retriever, retrieve
    from pyterrier_tite.store.downloads import index_folder
    from pyterrier_tite.store.index_info import index_info

    folder = index_folder(index)
    info = index_info(folder)
    check_topics_collection(index, info, args.topics)
    retriever = index_retriever(folder, model, args.k, **flags.model_options(args), threads=args.threads or 1, **search)
    return retrieve(retriever, topics, verbose=not args.quiet), info


def _first_stage(args: argparse.Namespace, topics):
    """The candidates of ``--first-stage``: BM25 over ``--dataset``, or an index."""
    from pyterrier_tite.cli.service import retrieve
    from pyterrier_tite.store.downloads import is_package_url

    stage = args.first_stage
    if os.path.isdir(stage) or is_package_url(stage) or (os.path.isfile(stage) and stage.lower() != "bm25"):
        return retrieve_from(stage, args, topics)[0]
    if args.first_stage.lower() != "bm25":
        raise ValueError(f"--first-stage is bm25 or an index folder, got {args.first_stage!r}")
    if args.dataset is None or os.path.isfile(args.dataset):
        raise ValueError(
            "--first-stage bm25 needs --dataset to be an ir_datasets id (for a corpus file, build an index with "
            "`pyterrier-tite index --model bm25` and pass it as --first-stage DIR)"
        )
    from pyterrier_tite.pt.first_stage import bm25

    return retrieve(bm25(args.dataset, num_results=args.k, threads=args.threads or 1), topics, verbose=not args.quiet)
