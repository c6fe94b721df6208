"""How close a TITE made from a bi-encoder's BERT is to it before any training (``python -m
experiments.distill_tite.diagnostics tite-start``): per pooling structure, the cosine of its vectors and of every
layer's rows to the teacher's states pooled the same way."""

from __future__ import annotations


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
