"""The bundle that carries the cross-encoder (and TITE) distillation to a GPU machine without the data, and the models
that come back from it: ``<out>/data.json.gz`` (the training pool and the evaluation candidates, texts stored once)
and the start model with fp16 weights (widened back to fp32 there); kept models come back as ``<name>.tar.<i>`` parts
(what returns from the machine is limited per file). Used by :mod:`experiments.distill_rerankers.gpu` and
:mod:`experiments.distill_tite.gpu`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil

#: the start model's files besides its weights (the sentence-transformers ones say how a bi-encoder pools)
START_FILES = ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
               "modules.json", "sentence_bert_config.json", "1_Pooling/config.json")  # fmt: skip
EVALUATION = "dl19,dl20,vaswani,cranfield,cisi,cacm,scifact"


def names(text: str) -> list[str]:
    return [t for t in (s.strip() for s in text.split(",")) if t]


def bundle(args: argparse.Namespace) -> None:
    """Training pool + evaluation candidates -> ``<out>/data.json.gz``; the start model -> ``<out>/start``."""
    from experiments.common.offline_teacher import OfflineTeacher
    from experiments.common.training_bm25 import training_bm25
    from experiments.distill_rerankers.data import teacher_labels, training_candidates
    from pyterrier_tite.start_points import resolve

    texts: dict[str, int] = {}
    pool = training_candidates(names(args.sources), training_bm25, args.depth, args.max_queries, seed=42)
    scored = OfflineTeacher.default(args.teacher_cache, verbose=True)(pool)
    labels = teacher_labels(scored, args.positives)
    scored = scored.merge(labels, on=["qid", "docno"], how="left")
    train = {
        "qid": scored["qid"].astype(str).tolist(),
        "query": index_texts(texts, scored["query"]),
        "docno": scored["docno"].astype(str).tolist(),
        "text": index_texts(texts, scored["text"]),
        "rank": scored["rank"].astype(int).tolist(),
        "teacher": scored["score"].astype(float).tolist(),
        "label": scored["label"].astype(int).tolist(),
    }
    evaluation = evaluation_candidates(texts, names(args.evaluate), args.eval_depth)
    recipe = {k: getattr(args, k) for k in ("sources", "depth", "max_queries", "positives", "eval_depth")}
    save_bundle(args.out, recipe, list(texts), train, evaluation, resolve(args.start))
    print(f"{pool['qid'].nunique()} training queries, {len(pool)} candidates, {len(texts)} texts -> {args.out}")


def load_bundle(folder: str) -> dict:
    """``recipe``, ``texts``, ``train`` and ``eval`` of a bundle written by :func:`save_bundle`."""
    with gzip.open(os.path.join(folder, "data.json.gz"), "rt") as f:
        return json.load(f)


def index_texts(texts: dict[str, int], values) -> list[int]:
    """Each value's position in the bundle's text table ``texts`` (added when new)."""
    return [texts.setdefault(str(v), len(texts)) for v in values]


def evaluation_candidates(texts: dict[str, int], datasets: list[str], depth: int) -> dict[str, dict[str, list]]:
    """BM25's top-``depth`` (TREC DL: the provided run) of each dataset's judged queries, texts indexed in ``texts``."""
    from pyterrier_tite.pt.first_stage import candidates, topics_and_qrels

    evaluation = {}
    for dataset in datasets:
        topics, _ = topics_and_qrels(dataset)
        run = candidates(dataset, depth)(topics)
        evaluation[dataset] = {
            "qid": run["qid"].astype(str).tolist(),
            "query": index_texts(texts, run["query"]),
            "docno": run["docno"].astype(str).tolist(),
            "text": index_texts(texts, run["text"]),
            "score": run["score"].astype(float).tolist(),
        }
        print(f"{dataset}: {run['qid'].nunique()} queries, {len(run)} candidates")
    return evaluation


def save_bundle(out: str, recipe: dict, texts: list[str], train: dict, evaluation: dict, start: str) -> None:
    """``<out>/data.json.gz`` (rows refer to ``texts`` by index) and ``<out>/start`` (the start model, fp16 weights)."""
    os.makedirs(out, exist_ok=True)
    with gzip.open(os.path.join(out, "data.json.gz"), "wt") as f:
        json.dump({"recipe": recipe, "texts": texts, "train": train, "eval": evaluation}, f)
    copy_model(start, "model.safetensors", os.path.join(out, "start"), "model.fp16.safetensors", "float16")


def copy_model(folder: str, weights: str, target: str, name: str, dtype: str) -> str:
    """The model of ``folder`` (config, tokenizer, ``weights``) in ``target``, floating weights cast to ``dtype`` and
    saved as ``name``."""
    os.makedirs(target, exist_ok=True)
    for file in START_FILES:
        if os.path.exists(os.path.join(folder, file)):
            os.makedirs(os.path.dirname(os.path.join(target, file)), exist_ok=True)
            shutil.copy(os.path.join(folder, file), os.path.join(target, file))
    cast_weights(os.path.join(folder, weights), dtype, os.path.join(target, name))
    return target


def cast_weights(path: str, dtype: str, target: str | None = None) -> None:
    """The safetensors file ``path`` with its floating tensors cast to ``dtype`` (metadata kept), written to
    ``target`` (default: in place)."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(path, framework="pt") as f:
        metadata = f.metadata()
    cast = getattr(torch, dtype)
    tensors = {k: v.to(cast) if v.is_floating_point() else v for k, v in load_file(path).items()}
    save_file(tensors, target or path, metadata=metadata)


#: the size of each part of a kept model (what comes back from the GPU machine is limited per file)
PART_BYTES = 15 * 2**20


def pack_model(folder: str, out: str, name: str, dtype: str) -> list[str]:
    """A saved model folder as ``<out>/<name>.tar.<i>`` parts of at most ``PART_BYTES``, weights cast to ``dtype``."""
    import glob
    import io
    import tarfile

    for weights in glob.glob(os.path.join(folder, "**", "*.safetensors"), recursive=True):  # query_encoder/ too
        cast_weights(weights, dtype)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(folder, arcname=name)
    data = buffer.getvalue()
    parts = []
    for i, start in enumerate(range(0, len(data), PART_BYTES)):
        parts.append(os.path.join(out, f"{name}.tar.{i}"))
        with open(parts[-1], "wb") as f:
            f.write(data[start : start + PART_BYTES])
    return parts


def unpack_model(args: argparse.Namespace) -> None:
    """The parts written by ``train --keep`` -> a model folder (fp32 weights) that ``from_pretrained`` loads."""
    import glob
    import io
    import tarfile

    parts = sorted(glob.glob(f"{args.parts}.tar.*"), key=lambda p: int(p.rsplit(".", 1)[1]))
    if not parts:
        raise SystemExit(f"no parts {args.parts}.tar.<i>")
    if [int(p.rsplit(".", 1)[1]) for p in parts] != list(range(len(parts))):
        raise SystemExit(f"parts of {args.parts} are missing: found {[os.path.basename(p) for p in parts]}")
    data = b"".join(open(p, "rb").read() for p in parts)
    name = os.path.basename(args.parts)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(args.out, filter="data")
    folder = os.path.join(args.out, name)
    for weights in glob.glob(os.path.join(folder, "**", "*.safetensors"), recursive=True):
        cast_weights(weights, "float32")
    print(f"{len(parts)} parts -> {folder}")


def widen_start(folder: str, target: str) -> str:
    """The bundled start model with fp32 weights (as every checkpoint it stands for) in ``target``."""
    return copy_model(folder, "model.fp16.safetensors", target, "model.safetensors", "float32")
