"""How a distilled student ranks against its teacher and other runs, from the indexes their evaluation cached
(``python -m experiments.distill_tite.diagnostics dense-paired|dense-sensitivity|seen-unseen``): paired differences,
each collection's sensitivity to the student's score error, and whether documents it trained on rank better."""

from __future__ import annotations

import json


def paired_model(entry: str):
    """A distillation run as ``dense-paired`` names it: FOLDER (as saved), FOLDER@tite (its own query vectors) or
    FOLDER@<bi-encoder> (that model's; 'minilm' or a folder)."""
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder
    from pyterrier_tite.pt.tite import TITE
    from pyterrier_tite.start_points import resolve

    folder, _, queries = entry.partition("@")
    if not queries:
        return TITE.from_pretrained(folder, batch_size=64)
    query_model = None if queries == "tite" else BertBiEncoder.from_pretrained(resolve(queries), batch_size=64)
    return TITE.from_pretrained(folder, batch_size=64, query_model=query_model)


def dense_paired(folders: list[str], collections: list[str], against_all: bool = False) -> list[dict]:
    import os

    from pyterrier.measures import nDCG

    from experiments.common.rerank_experiment import per_query, summarise
    from experiments.distill_tite.recipe import STUDENT_LABEL
    from pyterrier_tite import datasets
    from pyterrier_tite.pt.dense_pipeline import dense_pipeline

    models = {entry: paired_model(entry) for entry in folders}  # loaded once, all sets
    rows = []
    for dataset in collections:
        ds = datasets.get_dataset(datasets.irds_id(dataset))
        topics, qrels = ds.get_topics(), ds.get_qrels()
        frames = {}
        for entry, model in models.items():  # the name the recipe evaluated it under, so its cached index is found
            index_root = os.path.join(entry.partition("@")[0], "eval")
            frames[entry] = dense_pipeline(model, STUDENT_LABEL, dataset, index_root, verbose=False)(topics)
        values = per_query(frames, topics, qrels, nDCG @ 10)
        earlier = {f: folders[:i] if against_all else [folders[0]] for i, f in enumerate(folders) if i}
        summary = summarise(values, {f: [f] for f in folders}, earlier)
        rows += [{**{k: v for k, v in r.items() if k not in ("seeds", "std")}, "dataset": dataset} for r in summary]
    return rows


def ranking_sensitivity(pairs, k: int = 10) -> dict:
    """Means over queries, each given as (teacher scores, student scores) of the same candidates: the teacher's
    spread over its top ``k`` (rank 1 minus rank k), the std of the student's error (a shift common to all candidates
    costs nothing: rankings see differences only), their ratio, and the share of the teacher's top ``k`` kept."""
    import numpy as np

    spread, error, kept = [], [], []
    for teacher, student in pairs:
        teacher, student = np.asarray(teacher, dtype=np.float64), np.asarray(student, dtype=np.float64)
        if len(teacher) < k:
            raise ValueError(f"a query with {len(teacher)} candidates: at least k = {k} are needed")
        order = np.argsort(-teacher, kind="stable")
        spread.append(teacher[order[0]] - teacher[order[k - 1]])
        error.append(np.std(student - teacher))
        kept.append(len(set(order[:k]) & set(np.argsort(-student, kind="stable")[:k])) / k)
    spread, error = np.array(spread), np.array(error)
    return {"queries": len(spread), "spread": round(float(spread.mean()), 4), "error": round(float(error.mean()), 4),
            "error_over_spread": round(float(np.mean(error / np.maximum(spread, 1e-12))), 3),
            "top_kept": round(float(np.mean(kept)), 3)}  # fmt: skip


def dense_sensitivity(folder: str, collections: list[str], teacher_name: str = "minilm", depth: int = 100) -> list:
    import os

    import numpy as np
    import torch
    import torch.nn.functional as F
    from pyterrier_dr import FlexIndex

    from experiments.distill_tite.recipe import STUDENT_LABEL, teacher_label
    from pyterrier_tite import datasets
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder
    from pyterrier_tite.pt.dense_pipeline import RERANKED, dense_index_path, dense_pipeline
    from pyterrier_tite.pt.first_stage import trec_dl_bm25
    from pyterrier_tite.pt.tite import TITE
    from pyterrier_tite.start_points import resolve

    root = os.path.join(folder, "eval")
    student = TITE.from_pretrained(folder, batch_size=64)
    teacher = BertBiEncoder.from_pretrained(resolve(teacher_name), batch_size=64)
    names = {"student": STUDENT_LABEL, "teacher": teacher_label(teacher_name)}

    def mean_cosine(a, b) -> float:
        return round(float(F.cosine_similarity(torch.from_numpy(a), torch.from_numpy(b)).mean()), 4)

    rows = []
    for dataset in collections:
        ds = datasets.get_dataset(datasets.irds_id(dataset))
        topics = ds.get_topics()
        queries = np.asarray(teacher.encode_queries(topics["query"].tolist()))
        if dataset in RERANKED:  # the candidates are BM25's, encoded by both here
            run = trec_dl_bm25(RERANKED[dataset])(topics)
            texts = run.drop_duplicates("docno")
            row = {d: i for i, d in enumerate(texts["docno"])}
            t_docs, s_docs = (np.asarray(m.encode_docs(texts["text"].tolist())) for m in (teacher, student))
            by_qid = {q: np.array([row[d] for d in g["docno"]]) for q, g in run.groupby("qid")}
            candidates = [by_qid[q] for q in topics["qid"] if q in by_qid]
            queries = queries[[i for i, q in enumerate(topics["qid"]) if q in by_qid]]
            relevant_cosine = None
        else:  # full retrieval: both models' vectors from the evaluation's cached indexes (built if missing)
            vectors = {}
            for role, model in (("teacher", teacher), ("student", student)):
                dense_pipeline(model, names[role], dataset, root, verbose=False)
                docnos, vecs, _ = FlexIndex(dense_index_path(model, names[role], dataset, root)).payload()
                vectors[role] = ([docnos.fwd[i] for i in range(len(vecs))], np.asarray(vecs))
            if vectors["teacher"][0] != vectors["student"][0]:
                raise ValueError(f"{dataset}: the two cached indexes hold other documents or another order")
            docnos = vectors["teacher"][0]
            t_docs, s_docs = vectors["teacher"][1], vectors["student"][1]
            scores = queries @ t_docs.T
            candidates = list(np.argsort(-scores, axis=1)[:, :depth])
            qrels = ds.get_qrels()
            index_of = {d: i for i, d in enumerate(docnos)}
            relevant = [index_of[d] for d in qrels[qrels["label"] > 0]["docno"].unique() if d in index_of]
            relevant_cosine = mean_cosine(t_docs[relevant], s_docs[relevant])
        pairs = [(t_docs[c] @ q, s_docs[c] @ q) for q, c in zip(queries, candidates, strict=True)]
        rows.append({"dataset": dataset, "documents": len(t_docs),
                     "doc_cosine": mean_cosine(t_docs, s_docs),
                     "relevant_doc_cosine": relevant_cosine, **ranking_sensitivity(pairs)})  # fmt: skip
    return rows


#: the collections with documents a reduced recipe leaves out, and the queries that rank them
SEEN_UNSEEN_QUERIES = {"beir/scifact": "beir/scifact/test", "vaswani": "vaswani", "local/cacm": "local/cacm",
                       "msmarco-passage/trec-dl-2019/judged": "msmarco-passage/trec-dl-2019/judged"}  # fmt: skip


def split_seen(docs: dict[str, str], trained: set[str], count: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """Up to ``count`` texts of documents whose text (whitespace-normalised, as the recipe stores it) is among the
    ``trained`` ones, and as many that are not, each a seeded sample in docno order."""
    import random

    from experiments.distill_tite.texts import normalise_text

    rng = random.Random(seed)
    seen, unseen = [], []
    for docno in sorted(docs):
        text = normalise_text(docs[docno])
        if text:
            (seen if text in trained else unseen).append(text)
    size = min(count, len(seen), len(unseen))
    return sorted(rng.sample(seen, size)), sorted(rng.sample(unseen, size))


def group_fidelity(teacher_docs, student_docs, teacher_queries, k: int = 10) -> tuple[list[float], list[float]]:
    """Each document's cosine between student and teacher vector, and per query the share of the teacher's top k
    (teacher query vector against the teacher's document vectors) that the student's document vectors keep."""
    import torch.nn.functional as F

    t_docs, s_docs, queries = (F.normalize(x.float(), dim=-1) for x in (teacher_docs, student_docs, teacher_queries))
    k = min(k, t_docs.shape[0])
    top_t, top_s = (queries @ t_docs.T).topk(k).indices, (queries @ s_docs.T).topk(k).indices
    overlap = [len(set(a.tolist()) & set(b.tolist())) / k for a, b in zip(top_t, top_s, strict=True)]
    return (t_docs * s_docs).sum(-1).tolist(), overlap


def seen_unseen(folder: str, count: int, max_docs: int, max_queries: int | None, seed: int,
                teacher_name: str = "minilm") -> dict:  # fmt: skip
    import os
    from statistics import fmean

    import torch
    from scipy import stats

    from experiments.distill_tite.texts import collect_distillation_texts
    from pyterrier_tite import datasets
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder
    from pyterrier_tite.pt.tite import TITE
    from pyterrier_tite.start_points import resolve
    from pyterrier_tite.training.splade_data import doc_texts

    torch.set_num_threads(2)
    texts = collect_distillation_texts(max_docs=max_docs, max_queries=max_queries, seed=seed)
    cache = os.path.join(folder, "teacher-vectors", "texts.json")
    if not os.path.exists(cache):
        raise SystemExit(f"{cache} is missing: without it the run's texts cannot be checked")
    with open(cache) as f:
        if json.load(f)["fingerprint"] != texts.fingerprint():
            raise SystemExit(f"{folder} trained on other texts: check --max-docs / --max-queries / --seed")
    trained = {t for t, role in zip(texts.texts, texts.roles, strict=True) if role == "doc"}
    teacher = BertBiEncoder.from_pretrained(resolve(teacher_name), device="cpu").text_encoder
    student = TITE.from_pretrained(folder, device="cpu").text_encoder
    result = {}
    for collection, query_set in SEEN_UNSEEN_QUERIES.items():
        seen, unseen = split_seen(doc_texts(collection), trained, count)
        if not seen:
            continue
        queries = datasets.get_dataset(query_set).get_topics()["query"].tolist()
        with torch.inference_mode():
            t_queries = teacher.encode_queries(queries, 32)
            (cos_s, top_s), (cos_u, top_u) = (
                group_fidelity(teacher.encode_docs(group, 32), student.encode_docs(group, 32), t_queries)
                for group in (seen, unseen))  # fmt: skip
        welch = stats.ttest_ind(cos_s, cos_u, equal_var=False)
        paired = stats.ttest_rel(top_s, top_u)
        result[collection] = {"docs_per_group": len(seen), "queries": len(queries),
                              "cosine_seen": round(fmean(cos_s), 4), "cosine_unseen": round(fmean(cos_u), 4),
                              "cosine_p": float(welch.pvalue),
                              "top10_kept_seen": round(fmean(top_s), 4), "top10_kept_unseen": round(fmean(top_u), 4),
                              "top10_p": float(paired.pvalue)}  # fmt: skip
    return result
