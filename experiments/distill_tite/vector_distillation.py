"""Distil a bi-encoder's vectors into a faster student: TITE made from the teacher's own BERT
(``TITE.from_bert``) learns to reproduce the teacher's vector of every text, so it can replace the teacher in an
existing pipeline or index at a fraction of the encoding cost.

No labels are needed, only text (:mod:`.texts`): the collections' documents, training queries and pseudo-queries
(one sentence of a document, :func:`~pyterrier_tite.training.pseudo_queries.cloze_pair`). For a batch of texts with
teacher vectors ``t`` and student vectors ``s`` (both L2-normalised, the teacher's cosine):

- ``cosine``: ``mean(1 - cos(s_i, t_i))``, the vectors themselves;
- ``kl``: ``KL(softmax(T_i / tau) || softmax(S_i / tau))`` over each row ``i`` of the in-batch similarity matrices
  ``T = t t^T``, ``S = s s^T`` (diagonal left out), i.e. the student ranks the batch's other texts as the teacher
  does. A document travels with its pseudo-query, so every batch holds query-document pairs the teacher finds
  similar. ``tau = 0.05`` is the scale sentence-transformers trains MiniLM with (20).
- ``anchor`` (the recipe weighs it 1; 0 here, off): the same KL between the student's documents and a fixed
  bank of the teacher's query vectors (every query and pseudo-query of the data, cached, so free to use): each
  document ranks the bank's queries, and each query of the bank ranks the batch's documents, as the teacher's do.
  The in-batch KL sees about 30 queries per step; the bank holds thousands, so the student's scarce capacity goes to
  the directions queries look in (+0.005 to +0.022 nDCG@10 at equal steps; docs/results.md, "A bank of the
  teacher's query vectors").

With ``documents_only`` the student encodes only the documents: every query row of the batch keeps the teacher's own
vector, so the KL teaches the student's documents to sit where the teacher's queries find them. Such a student must be
used with the teacher as its query encoder (``TITE(query_model=teacher)``, which the recipe saves by default for
every student: a short query costs little to encode, and pooling a few query tokens loses most); its steps are
cheaper, its quality the same as training both sides (docs/results.md, "The teacher as query encoder").

The teacher's vectors are computed once, in shards cached on disk (an interrupted run loses at most one shard), and
the training runs through the shared :class:`~pyterrier_tite.training.loop.Trainer` (resume, precision, logging).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from pyterrier_tite.devices import autocast
from pyterrier_tite.models.bert_biencoder.modeling import TextEncoder
from pyterrier_tite.models.bert_biencoder.tokenization import Role
from pyterrier_tite.training.loop import Trainer, TrainingArguments, epoch_rng
from pyterrier_tite.training.losses import full_precision


@dataclass
class DistillationTexts:
    """Texts with the role each is encoded in (queries and documents are cut and marked differently) and the
    groups that share a batch (a document with its pseudo-query; a lone query)."""

    texts: list[str]
    roles: list[Role]
    groups: list[list[int]]

    def __post_init__(self) -> None:
        if len(self.texts) != len(self.roles):
            raise ValueError(f"{len(self.texts)} texts but {len(self.roles)} roles")
        bad = {r for r in self.roles if r not in ("query", "doc")}
        if bad:
            raise ValueError(f"roles must be 'query' or 'doc', got {sorted(bad)}")

    def __len__(self) -> int:
        return len(self.texts)

    def fingerprint(self) -> str:
        """A hash of texts and roles: cached teacher vectors belong to exactly these."""
        digest = hashlib.sha256()
        for text, role in zip(self.texts, self.roles, strict=True):
            digest.update(role.encode() + b"\0" + text.encode() + b"\0")
        return digest.hexdigest()


@dataclass
class DistillationWeights:
    cosine: float = 1.0
    kl: float = 1.0
    temperature: float = 0.05
    #: weight of the KL against the bank of teacher query vectors (:func:`anchor_kl`; 0: off)
    anchor: float = 0.0


def relational_kl(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL between the rows of the teacher's and the student's in-batch similarity matrices (diagonal excluded);
    inputs ``[N, D]``, L2-normalised."""
    n = student.shape[0]
    if n < 3:  # one other text per row: the softmax is constant
        return student.new_zeros(())
    off_diagonal = ~torch.eye(n, dtype=torch.bool, device=student.device)
    s = (student @ student.T / temperature)[off_diagonal].view(n, n - 1)
    t = (teacher @ teacher.T / temperature)[off_diagonal].view(n, n - 1)
    return _rows_kl(s, t)


def _rows_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Mean over rows of KL(softmax(teacher row) || softmax(student row))."""
    return F.kl_div(F.log_softmax(student_logits, -1), F.log_softmax(teacher_logits, -1), log_target=True,
                    reduction="batchmean")  # fmt: skip


def anchor_kl(student: torch.Tensor, teacher: torch.Tensor, anchors: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL of the documents' scores against a bank of fixed query vectors, both ways, averaged: each document's
    distribution over the bank (which queries find it) and each bank query's distribution over the documents (how
    it ranks them). ``student`` / ``teacher``: ``[n, D]`` L2-normalised vectors of the same documents; ``anchors``:
    ``[M, D]`` L2-normalised. The second direction needs two documents or more."""
    s = student @ anchors.T / temperature
    t = teacher @ anchors.T / temperature
    if student.shape[0] < 2:
        return _rows_kl(s, t)
    return (_rows_kl(s, t) + _rows_kl(s.T, t.T)) / 2  # documents rank queries; queries rank documents


@full_precision
def vector_distillation_loss(
    student: torch.Tensor,
    teacher: torch.Tensor,
    weights: DistillationWeights,
    learned: torch.Tensor | None = None,
    *,
    anchors: torch.Tensor | None = None,
    documents: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Cosine + relational KL (module docstring), computed in fp32 whatever the forward's precision (autocast off:
    under bf16 autocast the similarity products would round to bf16, a relative 2^-8 on logits of up to
    ``1 / temperature``, the teacher's targets included). ``learned`` (row indices) limits the cosine term to the rows
    the student encoded; the others hold the teacher's vectors. With ``weights.anchor``, ``anchors`` (the bank,
    L2-normalised) and ``documents`` (row indices of the batch's documents) add :func:`anchor_kl`."""
    s = F.normalize(student, dim=-1)
    t = F.normalize(teacher, dim=-1)
    rows = slice(None) if learned is None else learned
    terms = {
        "cosine": weights.cosine * (1 - (s[rows] * t[rows]).sum(-1)).mean(),
        "kl": weights.kl * relational_kl(s, t, weights.temperature),
    }
    if weights.anchor and (anchors is None or documents is None):
        raise ValueError("the anchor term needs the bank of query vectors and the batch's document rows")
    if weights.anchor and len(documents):
        terms["anchor"] = weights.anchor * anchor_kl(s[documents], t[documents], anchors, weights.temperature)
    return sum(terms.values()), {k: float(v.detach()) for k, v in terms.items()}


def encode_mixed(encoder: TextEncoder, texts: Sequence[str], roles: Sequence[Role], batch_size: int) -> torch.Tensor:
    """Vectors of texts of both roles, in input order (each role encoded with its own length and marker)."""
    out: torch.Tensor | None = None
    for role in ("query", "doc"):
        rows = [i for i, r in enumerate(roles) if r == role]
        if not rows:
            continue
        vectors = encoder.encode([texts[i] for i in rows], role, batch_size)
        if out is None:
            out = vectors.new_empty(len(texts), vectors.shape[1])
        out[torch.tensor(rows, device=vectors.device)] = vectors
    if out is None:
        raise ValueError("no texts to encode")
    return out


def teacher_vectors(
    teacher: TextEncoder,
    data: DistillationTexts,
    cache_dir: str,
    *,
    batch_size: int = 64,
    shard_size: int = 4096,
    precision: str = "fp32",
    verbose: bool = True,
) -> torch.Tensor:
    """``[N, D]`` teacher vectors of ``data`` (fp32, CPU), computed shard by shard into ``cache_dir``; a later call
    with the same texts reuses the finished shards. Within a shard texts are encoded sorted by length (less
    padding). ``cache_dir`` holding vectors of other texts raises instead of mixing them."""
    from tqdm.auto import tqdm

    os.makedirs(cache_dir, exist_ok=True)
    stamp = os.path.join(cache_dir, "texts.json")
    fingerprint = data.fingerprint()
    if os.path.exists(stamp):
        with open(stamp) as f:
            stored = json.load(f)
        if stored.get("fingerprint") != fingerprint:
            raise ValueError(f"{cache_dir} holds teacher vectors of other texts; delete it or choose another folder")
    else:
        with open(stamp, "w") as f:
            json.dump({"fingerprint": fingerprint, "texts": len(data)}, f)
    shards = []
    starts = range(0, len(data), shard_size)
    bar = tqdm(total=len(data), desc="teacher vectors", unit="text", disable=not verbose)
    for number, start in enumerate(starts):
        path = os.path.join(cache_dir, f"shard-{number:05d}.pt")
        end = min(start + shard_size, len(data))
        if os.path.exists(path):
            shards.append(torch.load(path))
        else:
            order = sorted(range(start, end), key=lambda i: len(data.texts[i]))
            with torch.inference_mode(), autocast(teacher.device, precision):
                vectors = encode_mixed(teacher, [data.texts[i] for i in order], [data.roles[i] for i in order],
                                       batch_size)  # fmt: skip
            shard = torch.empty(end - start, vectors.shape[1])
            shard[torch.tensor(order) - start] = vectors.float().cpu()
            torch.save(shard, path + ".tmp")
            os.replace(path + ".tmp", path)
            shards.append(shard)
        bar.update(end - start)
    bar.close()
    return torch.cat(shards) if shards else torch.zeros(0, teacher.dim)


def group_batches(groups: Sequence[list[int]], batch_size: int, seed: int) -> Callable[[int, int, int], Iterator]:
    """The Trainer's batch source: per epoch a seeded shuffle of the groups, ``batch_size`` groups per batch (a
    batch = the flat list of its groups' text indices), each rank a disjoint shard; the last short batch is
    dropped."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")

    def batches(epoch: int, rank: int, world_size: int) -> Iterator[list[int]]:
        order = list(range(len(groups)))
        epoch_rng(seed, epoch).shuffle(order)
        shard = order[rank::world_size]
        for start in range(0, len(shard) - batch_size + 1, batch_size):
            yield [i for g in shard[start : start + batch_size] for i in groups[g]]

    return batches


def _documents_only_loss(
    encode_documents: Callable[[list[int]], torch.Tensor],
    roles: list[Role],
    targets: torch.Tensor,
    weights: DistillationWeights,
    anchors: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss with the teacher's vectors in the query rows and the student's (``encode_documents(rows of the
    batch)``) in the document rows."""
    rows = [i for i, role in enumerate(roles) if role == "doc"]
    if not rows:
        raise ValueError("a batch without documents: with documents_only, every batch needs documents (a larger "
                         "batch size)")  # fmt: skip
    vectors = encode_documents(rows)
    learned = torch.tensor(rows, device=vectors.device)
    teacher = targets.to(vectors.device)
    mixed = teacher.index_put((learned,), vectors.float())
    return vector_distillation_loss(mixed, teacher, weights, learned, anchors=anchors, documents=learned)


def query_bank(data: DistillationTexts, targets: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """The anchor term's bank: the teacher's vectors of every query and pseudo-query of ``data``, L2-normalised."""
    rows = [i for i, role in enumerate(data.roles) if role == "query"]
    if not rows:
        raise ValueError("the anchor term needs queries or pseudo-queries in the data; it has documents only")
    return F.normalize(targets[rows].float(), dim=-1).to(device)


def distill_vectors(
    student: TextEncoder,
    data: DistillationTexts,
    targets: torch.Tensor,
    args: TrainingArguments,
    save: Callable[[str], None],
    *,
    batch_size: int = 32,
    weights: DistillationWeights | None = None,
    resume: bool = True,
    documents_only: bool = False,
) -> list[dict[str, float]]:
    """Train ``student`` (its ``.model``) to reproduce ``targets`` (teacher vectors, one per text of ``data``);
    ``batch_size`` counts groups. Saves with ``save(args.output_dir)``; returns the per-step log.
    ``documents_only``: the student encodes only the documents (module docstring)."""
    if targets.shape[0] != len(data):
        raise ValueError(f"{targets.shape[0]} teacher vectors for {len(data)} texts")
    if len(data.groups) < batch_size:
        raise ValueError(f"{len(data.groups)} text groups cannot fill one batch of {batch_size}")
    weights = weights or DistillationWeights()
    anchors = query_bank(data, targets, student.device) if weights.anchor else None

    def loss_fn(module, batch: list[int], step: int):
        texts, roles = [data.texts[i] for i in batch], [data.roles[i] for i in batch]
        if documents_only:
            def encode_documents(rows: list[int]) -> torch.Tensor:
                return student.encode([texts[i] for i in rows], "doc", len(rows))

            return _documents_only_loss(encode_documents, roles, targets[batch], weights, anchors)
        vectors = encode_mixed(student, texts, roles, len(batch))
        documents = None
        if anchors is not None:
            documents = torch.tensor([i for i, role in enumerate(roles) if role == "doc"], dtype=torch.long,
                                     device=vectors.device)  # fmt: skip
        return vector_distillation_loss(vectors, targets[batch].to(vectors.device), weights, anchors=anchors,
                                        documents=documents)  # fmt: skip

    # "hidden" and "freeze_layers" (options since deleted) stay recorded at their off values, so a checkpoint written
    # while they existed still resumes
    recipe = {**asdict(weights), "hidden": 0.0, "batch_size": batch_size, "freeze_layers": 0,
              "documents_only": documents_only}  # fmt: skip
    batches = group_batches(data.groups, batch_size, args.seed)
    trainer = Trainer(student.model, batches, loss_fn, lambda module, path: save(path), args, recipe)
    return trainer.train(resume=resume)
