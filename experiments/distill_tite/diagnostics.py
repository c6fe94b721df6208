"""Numbers behind the studies' explanations of their training runs, each from saved artefacts (from the repository
root):

    python -m experiments.distill_tite.diagnostics log runs/tite/exp-dot/cls/log.jsonl --first 5 --last 5
        mean of every logged loss term (and step seconds) over the first and last N steps, and the training minutes;
        --windows 50 adds the mean loss of every 50-step window (a step logged twice by a resumed run counts once)
    python -m experiments.distill_tite.diagnostics teacher-margins runs/tite/scifact_train_minilmdot_teacher_n7.jsonl
        mean teacher margin (positive minus each negative) of a bi-encoder samples file
    python -m experiments.distill_tite.diagnostics aggretriever-parts runs/scifact/agg-scratch-long --texts 3
        norms of the projected-[CLS] and agg* parts of an Aggretriever on the first scifact test queries
    python -m experiments.distill_tite.diagnostics splade-similarity runs/s12/mlm-flops-cranfield \
        --dataset cranfield --docs 20
        how document-specific a SPLADE / MLM model's vectors are: mean cosine between the first N documents' vectors
        (near 1 = a unigram model that weights the same frequent terms in every text), non-zeros, top terms
    python -m experiments.distill_tite.diagnostics tite-start --teacher minilm \
        --structures 5:2:intra,5:2:post,4:4:intra --docs 256
        how close a TITE made from a bi-encoder's BERT (before any training) is to it, per pooling structure
        (layers:kernel:location): cosine of its document / query vectors to the teacher's, overlap of each query's
        top 10 documents, and per layer the cosine of its rows to the teacher's states pooled the same way.
        Instead of a number of (late) pooling layers, "-/2/2/2/2/-:2:intra:mean" gives each layer's kernel (= stride;
        "-": none; the kernel field is then unused), and a fourth field "mean" skips the global pooling step and
        averages the last layer's rows
    python -m experiments.distill_tite.diagnostics dense-paired runs/distill/lr1e-4,runs/distill/pool4 \
        --datasets scifact,dl19
        paired comparison of the recipe's runs against the first (95% interval of the difference, p) from the
        indexes their own evaluation cached under <folder>/eval (so only queries, or DL's re-ranking, are encoded).
        FOLDER@minilm (or @<bi-encoder folder>) encodes that run's queries with that bi-encoder instead, FOLDER@tite
        with the TITE itself (a run saved with a query_encoder/ otherwise uses it): e.g.
        "runs/distill/k2-seed43,runs/distill/k2-seed43@minilm" asks what the teacher's query vectors add;
        --against-all pairs each run with every run before it, not only the first
    python -m experiments.distill_tite.diagnostics dense-sensitivity runs/distill/f5000-score-seed42 \
        --datasets scifact,vaswani,dl19
        how sensitive each collection's ranking is to a distilled student's error, with the teacher's query
        vectors: the documents' cosine to the teacher's, and per test query over the teacher's top --depth documents
        (TREC DL: BM25's candidates, encoded by both) the teacher's score spread over its top 10, the std of the
        student's score error, their ratio and how much of the teacher's top 10 the student keeps (full retrieval
        reads both models' vectors from the indexes the run's evaluation cached under <folder>/eval)
    python -m experiments.distill_tite.diagnostics seen-unseen runs/distill/struct500 --max-docs 2000 \
        --max-queries 2000 --seed 42
        whether a distilled student fits the documents it trained on better than others of the same collections
        (the recipe's texts include the evaluation collections' documents): the texts are rebuilt from the run's
        --max-docs / --max-queries / --seed (checked against its teacher-vector cache), and per collection up to --docs
        documents it saw and as many it did not are encoded by teacher and student: mean cosine of the student's
        vectors to the teacher's, and how many of the teacher's top 10 (under the teacher's vectors of the
        collection's test queries) the student keeps within each group (paired over queries)
"""

from __future__ import annotations

import argparse
import json


def log_summary(path: str, first: int, last: int, windows: int = 0) -> dict:
    """Means of the first / last steps (and of every ``windows``-step window); a step logged twice (a run resumed
    from a checkpoint older than its last logged step) counts once, with its later record."""
    records = [json.loads(line) for line in open(path) if line.strip()]
    rows = list({r.get("step", i): r for i, r in enumerate(records)}.values())
    rows.sort(key=lambda r: r.get("step", 0))
    keys = [k for k in rows[0] if k not in ("step", "lr")]

    def mean(part):
        return {k: round(sum(r.get(k, 0.0) for r in part) / len(part), 3) for k in keys}

    summary: dict = {"steps": len(rows)}
    if first > 0:
        summary[f"first_{first}"] = mean(rows[:first])
    if last > 0:  # rows[-0:] would be every row
        summary[f"last_{last}"] = mean(rows[-last:])
    if windows:
        summary[f"loss_per_{windows}"] = [mean(rows[i : i + windows])["loss"] for i in range(0, len(rows), windows)]
    if all("seconds" in r for r in rows):  # step times (logs since they were recorded): the run's training time
        summary["minutes"] = round(sum(r["seconds"] for r in rows) / 60, 2)
    return summary


def teacher_margins(path: str) -> dict:
    from pyterrier_tite.training.biencoder import load_samples

    samples = load_samples(path)
    margins = [s.scores[0] - other for s in samples for other in s.scores[1:]]
    scores = [x for s in samples for x in s.scores]
    return {"samples": len(samples), "mean_margin": round(sum(margins) / len(margins), 4),
            "min_score": round(min(scores), 4), "max_score": round(max(scores), 4)}  # fmt: skip


def aggretriever_parts(folder: str, count: int) -> dict:
    import torch
    from transformers import AutoTokenizer

    from pyterrier_tite import datasets
    from pyterrier_tite.models.aggretriever.modeling import AggretrieverEncoder

    texts = datasets.get_dataset("beir/scifact/test").get_topics()["query"].head(count).tolist()
    encoder, tokenizer = AggretrieverEncoder.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(texts, padding=True, truncation=True, max_length=32, return_tensors="pt")
    with torch.no_grad():
        out = encoder(batch["input_ids"], batch["attention_mask"])
    return {"texts": texts, "cls_norms": [round(float(x), 3) for x in out.cls.norm(dim=-1)],
            "agg_norms": [round(float(x), 4) for x in out.agg.norm(dim=-1)]}  # fmt: skip


def mean_pairwise_cosine(reps) -> float:
    """Mean cosine similarity over all pairs of distinct rows of ``[N, V]``."""
    import torch

    unit = torch.nn.functional.normalize(reps.float(), dim=1)
    similarities = unit @ unit.T
    return float(similarities[~torch.eye(len(reps), dtype=torch.bool)].mean())


def splade_similarity(folder: str, dataset: str, count: int, max_length: int = 128) -> dict:
    import torch

    from pyterrier_tite.pt.splade import Splade
    from pyterrier_tite.training.splade_data import doc_texts

    torch.set_num_threads(1)
    model = Splade.from_pretrained(folder, device="cpu")
    texts = list(doc_texts(dataset).values())[:count]
    reps = model.encode(texts, max_length)
    top = [model.tokenizer.convert_ids_to_tokens(r.topk(6).indices.tolist()) for r in reps[:2]]
    return {"docs": len(texts), "mean_cosine": round(mean_pairwise_cosine(reps), 3),
            "mean_nonzeros": round(float((reps > 0).sum(1).float().mean()), 1), "top_terms": top}  # fmt: skip


def with_kernels(model, kernels: list[int | None]):
    """The same TITE weights with pooling kernels (= strides) ``kernels`` per layer. The structure may end in several
    rows, which ``TiteConfig`` refuses for a model (it must end in one vector), so its check is bypassed: a probe."""
    import copy

    from pyterrier_tite.models import TiteModel

    if len(kernels) != model.config.num_hidden_layers:
        raise SystemExit(f"{len(kernels)} kernels for {model.config.num_hidden_layers} layers")
    config = copy.deepcopy(model.config)
    config.kernel_sizes, config.strides = list(kernels), list(kernels)
    rebuilt = TiteModel(config)
    rebuilt.load_state_dict(model.state_dict(), strict=True)
    return rebuilt.eval()


def mean_of_rows(encoder, texts: list[str], role: str, batch_size: int = 32):
    """L2-normalised mean of each text's last-layer rows (a TITE whose layers do not pool to one vector)."""
    import torch
    import torch.nn.functional as F

    from pyterrier_tite.models.packing import PackedLayout

    vectors = []
    for start in range(0, len(texts), batch_size):
        batch = encoder.inputs(texts[start : start + batch_size], role)
        mask = batch["attention_mask"].bool()
        cu = torch.zeros(mask.shape[0] + 1, dtype=torch.int32)
        cu[1:] = mask.sum(1).cumsum(0)
        out = encoder.model.forward_packed(batch["input_ids"][mask], cu, (mask.cumsum(1) - 1)[mask])
        layout = PackedLayout.from_lengths(torch.diff(out.cu_seqlens.long()), "cpu")
        sums = torch.zeros(layout.batch_size, out.last_hidden_state.shape[-1], dtype=out.last_hidden_state.dtype)
        sums.index_add_(0, layout.row_sequence, out.last_hidden_state)
        vectors.append(F.normalize(sums / layout.lengths.unsqueeze(1).to(sums.dtype), dim=-1))
    return torch.cat(vectors)


def pooled_teacher_targets(teacher_states, mask, cu_seqlens, kernels, strides) -> list:
    """Per student layer ``j = 1..n``: the teacher's layer-``j`` states (``[B, L, H]``, embeddings first, tokens
    selected by ``mask``) pooled by the student's layers ``1..j`` (the very op and windows the student uses, so partial
    windows at the end of a sequence are averaged the same way). ``cu_seqlens``: the student's packed offsets before
    layer 1 and after each layer (``TitePackedOutput.hidden_cu_seqlens``); ``kernels`` / ``strides``: its layers'
    pooling (None = no pooling)."""
    import torch

    from pyterrier_tite.ops import packed_mean_pool

    layers = len(kernels)
    if len(teacher_states) != layers + 1 or len(cu_seqlens) != layers + 1:
        raise ValueError(
            f"the teacher has {len(teacher_states) - 1} layers, the student {layers} ({len(cu_seqlens) - 1} offsets):"
            " layer-wise targets need a student made from the teacher's own layers"
        )
    targets = []
    for j in range(1, layers + 1):
        rows = teacher_states[j][mask]
        for i in range(1, j + 1):
            before, after = cu_seqlens[i - 1], cu_seqlens[i]
            if kernels[i - 1] is None or torch.equal(before, after):
                continue  # the student's layer i kept its rows (no pooling, or every sequence already one row)
            rows = packed_mean_pool(
                rows, before, kernels[i - 1], strides[i - 1], out_cu_seqlens=after.to(rows.device),
                out_total=int(after[-1]),
            )[0]  # fmt: skip
        targets.append(rows)
    return targets


def layer_targets(student, teacher, texts: list[str], role: str):
    """``(student batch, student output with hidden states, per-layer targets)`` for ``texts`` in ``role``: the
    student's rows of each layer and the teacher's states of that layer pooled through the same windows
    (:func:`pooled_teacher_targets`). Both encoders must tokenise identically (a TITE made from the teacher)."""
    import torch

    batch = {k: v.to(student.device) for k, v in student.inputs(texts, role).items()}
    states = student.model(**batch, output_hidden_states=True)
    with torch.no_grad():
        teacher_batch = {k: v.to(teacher.device) for k, v in teacher.inputs(texts, role).items()}
        mask = teacher_batch["attention_mask"].bool()
        if not torch.equal(teacher_batch["input_ids"][mask], batch["input_ids"][batch["attention_mask"].bool()]):
            raise ValueError("student and teacher tokenise these texts differently: no layer-wise targets")
        teacher_states = teacher.model(**teacher_batch, output_hidden_states=True).hidden_states
        config = student.model.config
        targets = pooled_teacher_targets(
            teacher_states, mask, states.hidden_cu_seqlens, config.kernel_sizes, config.strides
        )
    return batch, states, targets


def tite_start(teacher_name: str, structures: list[str], docs: int, queries: int) -> dict:
    import torch
    import torch.nn.functional as F

    from pyterrier_tite import datasets
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder
    from pyterrier_tite.pt.tite import TITE
    from pyterrier_tite.start_points import resolve
    from pyterrier_tite.training.splade_data import doc_texts as splade_doc_texts

    torch.set_num_threads(2)
    doc_texts = list(splade_doc_texts("scifact").values())[:docs]
    query_texts = datasets.get_dataset("beir/scifact/test").get_topics()["query"].head(queries).tolist()
    teacher = BertBiEncoder.from_pretrained(resolve(teacher_name), device="cpu").text_encoder
    with torch.inference_mode():
        t_docs, t_queries = teacher.encode_docs(doc_texts, 32), teacher.encode_queries(query_texts, 32)
    result = {"docs": len(doc_texts), "queries": len(query_texts)}
    for structure in structures:
        layers, kernel, location, *final = structure.split(":")
        mean, explicit = final == ["mean"], "/" in layers
        pooling = {"num_pooling_layers": 0 if explicit or mean else int(layers), "kernel": int(kernel),
                   "arrangement": "late", "pooling_location": location, "final_pooling": "none" if mean else "global",
                   "max_length": max(teacher.inputs.query_max_length, teacher.inputs.doc_max_length)}  # fmt: skip
        student = TITE.from_bert(resolve(teacher_name), pooling, query_marker=None, doc_marker=None,
                                 normalize=teacher.normalize, query_max_length=teacher.inputs.query_max_length,
                                 doc_max_length=teacher.inputs.doc_max_length, device="cpu").text_encoder  # fmt: skip
        if explicit or mean:
            count = student.model.config.num_hidden_layers
            kernels = ([None if k == "-" else int(k) for k in layers.split("/")] if explicit else
                       [int(kernel) if i >= count - int(layers) else None for i in range(count)])  # fmt: skip
            student.model = with_kernels(student.model, kernels)
        with torch.inference_mode():
            if mean:
                s_docs, s_queries = mean_of_rows(student, doc_texts, "doc"), mean_of_rows(student, query_texts, "query")
            else:
                s_docs, s_queries = student.encode_docs(doc_texts, 32), student.encode_queries(query_texts, 32)
            per_layer = []
            for start in range(0, len(doc_texts), 32):
                _, out, targets = layer_targets(student, teacher, doc_texts[start : start + 32], "doc")
                per_layer.append([F.cosine_similarity(a.float(), b.float()).mean() for a, b in
                                  zip(out.hidden_states[1:], targets, strict=True)])  # fmt: skip
        top_t = (F.normalize(t_queries, dim=-1) @ F.normalize(t_docs, dim=-1).T).topk(10).indices
        top_s = (F.normalize(s_queries, dim=-1) @ F.normalize(s_docs, dim=-1).T).topk(10).indices
        overlap = sum(len(set(a.tolist()) & set(b.tolist())) for a, b in zip(top_t, top_s, strict=True))
        overlap /= top_t.numel()
        result[structure] = {
            "doc_cosine": round(float(F.cosine_similarity(s_docs, t_docs).mean()), 3),
            "query_cosine": round(float(F.cosine_similarity(s_queries, t_queries).mean()), 3),
            "top10_overlap": round(overlap, 3),
            "layer_cosine": [round(float(sum(c[j] for c in per_layer) / len(per_layer)), 3)
                             for j in range(len(per_layer[0]))],
        }  # fmt: skip
    return result


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.distill_tite.diagnostics", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    log = commands.add_parser("log")
    log.add_argument("path")
    log.add_argument("--first", type=int, default=10)
    log.add_argument("--last", type=int, default=10)
    log.add_argument("--windows", type=int, default=0, help="also the mean loss of every N-step window")
    commands.add_parser("teacher-margins").add_argument("path")
    agg = commands.add_parser("aggretriever-parts")
    agg.add_argument("folder")
    agg.add_argument("--texts", type=int, default=3)
    similarity = commands.add_parser("splade-similarity")
    similarity.add_argument("folder")
    similarity.add_argument("--dataset", default="scifact")
    similarity.add_argument("--docs", type=int, default=20)
    start = commands.add_parser("tite-start")
    start.add_argument("--teacher", default="minilm")
    start.add_argument("--structures", default="5:2:intra", help="layers:kernel:location, comma-separated")
    start.add_argument("--docs", type=int, default=256)
    start.add_argument("--queries", type=int, default=300)
    paired = commands.add_parser("dense-paired")
    paired.add_argument("folders", help="the recipe's output folders (FOLDER@ENCODER: other query vectors), "
                        "comma-separated; the first is the baseline")
    paired.add_argument("--datasets", default="scifact")
    paired.add_argument("--against-all", action="store_true", help="pair each run with every run before it")
    sensitivity = commands.add_parser("dense-sensitivity")
    sensitivity.add_argument("folder", help="an output folder of the recipe")
    sensitivity.add_argument("--datasets", default="scifact,vaswani,cranfield-graded,dl19,dl20")
    sensitivity.add_argument("--teacher", default="minilm", help="the run's --teacher")
    sensitivity.add_argument("--depth", type=int, default=100, help="the teacher's top documents per query")
    memo = commands.add_parser("seen-unseen")
    memo.add_argument("folder")
    memo.add_argument("--docs", type=int, default=1000, help="documents per group and collection")
    memo.add_argument("--max-docs", type=int, required=True)
    memo.add_argument("--max-queries", type=int, default=None)
    memo.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    if args.command == "log":
        result = log_summary(args.path, args.first, args.last, args.windows)
    elif args.command == "teacher-margins":
        result = teacher_margins(args.path)
    elif args.command == "tite-start":
        result = tite_start(args.teacher, args.structures.split(","), args.docs, args.queries)
    elif args.command == "dense-paired":
        result = dense_paired(args.folders.split(","), args.datasets.split(","), args.against_all)
    elif args.command == "dense-sensitivity":
        result = dense_sensitivity(args.folder, args.datasets.split(","), args.teacher, args.depth)
    elif args.command == "seen-unseen":
        result = seen_unseen(args.folder, args.docs, args.max_docs, args.max_queries, args.seed)
    elif args.command == "splade-similarity":
        result = splade_similarity(args.folder, args.dataset, args.docs)
    else:
        result = aggretriever_parts(args.folder, args.texts)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
