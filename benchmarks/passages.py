"""Re-ranking short passages on the CPU: our re-rankers against what users pick today (issue 65).

Candidates: the TREC DL 2019 BM25 top-100 passages (with text) of the first ``--queries`` queries. The user's default is
a ``sentence_transformers.CrossEncoder`` (torch fp32; its ONNX / OpenVINO backends with ``--anchors``)
loaded from a cross-encoder folder, in fp32 and bf16 weights; ``t.MonoCE``, ``t.SparseCE(w=4)`` and ``t.CELI`` load the
same folder (fp32; MonoCE and SparseCE also in bf16 and int8). bf16 runs on a GPU or a CPU with native bf16
(AVX512_BF16 / AMX) only. The folder (``--folder``, default: built
once under the temp dir) is MiniLM-L6 (the shipped start point) saved as a ``BertForSequenceClassification`` whose score
head is a linear probe fitted to the MiniLM bi-encoder's scores on 10 other queries (:func:`build_folder`), so the
weights are the same for every system and no download is needed. No trained cross-encoder ships offline, so the int8
agreement printed is that of this stand-in (scores that spread, in a near-random order): pessimistic for a trained
model.

Timing: every system re-ranks all pairs in one call per round (the CrossEncoder one ``predict`` over all pairs, ours
one ``transform`` over the frame); systems are interleaved over ``--rounds`` and each keeps its best round, so
background load hurts all alike. Printed per system: ms per pair, speed ratio against the CrossEncoder at the same
precision (higher is faster; int8 against fp32), that ratio as a share of the FLOP-ratio limit (:func:`linear_work`)
and rank agreement with the CrossEncoder's scores (Spearman per query: min and mean; SparseCE and CELI change the
model, so their agreement is shown only for information); then each reduced precision against our fp32 and int8
against our bf16 (speed and Spearman). The CPU's features come first.

Also BM25 >> a dense bi-encoder as the re-ranker (the MiniLM bi-encoder, mean pooling, cosine): ``t.BertBiEncoder``
against ``pyterrier_dr.SBertBiEncoder`` loading the same folder, each ``.scorer()`` on the same frame, in fp32 and
(``dense-bf16``) in bf16 (the SBertBiEncoder's weights cast, ours ``dtype=torch.bfloat16``); their ratio is against the
SBertBiEncoder at the same precision.

On a GPU (``--device cuda``): fp32 and bf16 of each side (the CrossEncoder in bf16 through ``model_kwargs``, ours
with ``dtype=torch.bfloat16``, their default there); the int8 systems are CPU-only. A machine without the collections
reads the candidates from ``--pairs`` (written where they are by ``--dump-pairs``).

Run: ``python benchmarks/passages.py`` (``--help``); ``--threads`` defaults to 2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
import warnings

import numpy as np
import torch
from scipy.stats import spearmanr


def cpu_features() -> str:
    from pyterrier_tite.devices import cpu_flags

    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "?")
    except OSError:
        model = "?"
    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")
    have = [f for f in wanted if f in cpu_flags()]
    capability = torch.backends.cpu.get_cpu_capability()
    return f"CPU: {model}; torch capability {capability}; flags: {' '.join(have) or 'none of ' + ' '.join(wanted)}"


def build_folder(path: str, fit_frame) -> str:
    """MiniLM-L6 as a BertForSequenceClassification (num_labels=1) whose score head is a linear probe: the classifier
    is fitted (ridge regression on the pooler output) to the MiniLM bi-encoder's cosine of each pair of
    ``fit_frame`` (queries not in the benchmark). A random head scores every pair about the same, so int8 rounding
    alone would decide its order; the probe's scores spread (std ~0.1 within a query), but an untrained [CLS] carries
    little relevance, so their order is still near random: a pessimistic stand-in for a trained cross-encoder."""
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer, BertForSequenceClassification

    from pyterrier_tite.start_points import resolve

    start = resolve("minilm")
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = BertForSequenceClassification.from_pretrained(start, num_labels=1).eval()
    tokenizer = AutoTokenizer.from_pretrained(start)
    encoder = SentenceTransformer(start, device="cpu")
    queries, texts = list(fit_frame["query"]), list(fit_frame["text"])
    teacher = encoder.encode(queries, normalize_embeddings=True) * encoder.encode(texts, normalize_embeddings=True)
    target = teacher.sum(1)
    features = []
    with torch.no_grad():
        for i in range(0, len(queries), 32):
            pair = (queries[i : i + 32], texts[i : i + 32])
            batch = tokenizer(*pair, padding=True, truncation=True, return_tensors="pt")
            features.append(model.bert(**batch).pooler_output.numpy())
    x = np.concatenate(features)
    x = np.concatenate([x, np.ones((len(x), 1))], axis=1)
    weights = np.linalg.solve(x.T @ x + 1e-2 * np.eye(x.shape[1]), x.T @ target)
    with torch.no_grad():
        model.classifier.weight.copy_(torch.from_numpy(weights[:-1]).float()[None])
        model.classifier.bias.fill_(float(weights[-1]))
    fitted = x @ weights
    pearson = np.corrcoef(fitted, target)[0, 1]
    print(f"probe head: fitted to {len(target)} pairs, Pearson {pearson:.3f} with the bi-encoder on them")
    tmp = path + ".partial"
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    os.replace(tmp, path)
    return path


def candidates(first: int, count: int):
    """BM25 top-100 rows (with passage text) of DL19 queries ``first .. first + count - 1`` (in run order)."""
    import pyterrier_tite as t
    from pyterrier_tite.pt.first_stage import TREC_DL

    topics = t.datasets.get_dataset(TREC_DL["2019"]).get_topics()
    run = t.trec_dl_bm25("2019")(topics)
    qids = list(dict.fromkeys(run["qid"]))[first : first + count]
    return run[run["qid"].isin(qids)].reset_index(drop=True)


def linear_work(frame, folder: str, layers: int, batch_size: int = 32) -> dict[str, float]:
    """Token-layer units of linear-layer work (one unit: a token through one layer's Q, K, V, output and feed-forward
    projections) of the CrossEncoder (pairs sorted by characters, padded to the longest of each batch of 32, every
    layer) and of MonoCE / SparseCE as they run here; the CrossEncoder's work over ours is the speed ratio the FLOPs
    alone allow (attention, norms and activations aside)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    queries = {q: len(tokenizer(q, add_special_tokens=False)["input_ids"]) for q in dict.fromkeys(frame["query"])}
    docs = [len(ids) for ids in tokenizer(list(frame["text"]), add_special_tokens=False)["input_ids"]]
    q_len = [queries[q] for q in frame["query"]]
    pair = np.array(q_len) + np.array(docs) + 3
    chars = np.array([len(q) + len(d) for q, d in zip(frame["query"], frame["text"], strict=True)])
    ordered = pair[np.argsort(-chars, kind="stable")]
    padded = sum(len(b) * b.max() for b in np.array_split(ordered, range(batch_size, len(ordered), batch_size)))
    # the last layer, where only the [CLS] is read: keys and values (2 of 12 units) of every token, the rest of the
    # [CLS] (10 of 12); SparseCE computes its query rows' Q, K and V there too (3 of 12)
    mono = pair.sum() * (layers - 1 + 2 / 12) + len(pair) * 10 / 12
    doc_rows = (np.array(docs) + 1).sum()  # doc + [SEP]
    query_rows = sum(n + 1 for n in queries.values())  # one encoding per query
    sparse = (doc_rows + len(pair) + query_rows) * (layers - 1) + doc_rows * 2 / 12 + query_rows * 3 / 12 + len(pair)
    return {"CrossEncoder": padded * layers, "MonoCE": mono, "SparseCE": sparse}


def dump_pairs(frame, path: str) -> None:
    """The candidate frame as JSON columns (qid / docno stay strings, no parquet engine needed)."""
    columns = ["qid", "query", "docno", "text", "score", "rank"]
    with open(path, "w") as f:
        json.dump(frame[[c for c in columns if c in frame.columns]].to_dict("list"), f)


def load_pairs(path: str):
    import gzip

    import pandas as pd

    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        return pd.DataFrame(json.load(f))


def anchor_systems(python: str, folder: str, frame, rounds: int) -> dict:
    """Run benchmarks/st_backends.py with the anchors' own interpreter (their packages pin other transformers
    versions); its last stdout line is a JSON object ``{system: {"seconds", "scores"} | {"error"}}``."""
    with tempfile.TemporaryDirectory() as tmp:
        pairs = os.path.join(tmp, "pairs.json")
        dump_pairs(frame, pairs)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "st_backends.py")
        command = [python, script, "--folder", folder, "--pairs", pairs, "--rounds", str(rounds)]
        done = subprocess.run(command + ["--threads", str(torch.get_num_threads())], capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        return {"anchors": {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}}
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine(device: str) -> str:
    if device.startswith("cuda"):
        return f"GPU: {torch.cuda.get_device_name(device)}; torch {torch.__version__}"
    return cpu_features()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=None, help="every system's batch size (default: its own)")
    parser.add_argument("--folder", default=os.path.join(tempfile.gettempdir(), "pyterrier_tite_passages_probe_ce"))
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--pairs", default=None, help="read the candidates from this --dump-pairs file")
    parser.add_argument("--dump-pairs", default=None, help="write the candidates of --queries here and stop")
    every_system = "ce,ce-bf16,mono,mono-int8,mono-bf16,sparse4,sparse4-int8,sparse4-bf16,celi,dense,dense-bf16"
    parser.add_argument("--systems", default=every_system, help="comma-separated subset")
    parser.add_argument(
        "--anchors",
        default=None,
        help="a Python with sentence-transformers[onnx,openvino]: "
        "also the CrossEncoder's ONNX Runtime / OpenVINO backends (benchmarks/st_backends.py)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    import pyterrier_tite as t

    if args.dump_pairs:
        dump_pairs(candidates(0, args.queries), args.dump_pairs)
        return
    device = args.device
    print(machine(device))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    frame = load_pairs(args.pairs) if args.pairs else candidates(0, args.queries)
    folder = args.folder if args.pairs else build_folder(args.folder, candidates(args.queries, 10))
    pairs = list(zip(frame["query"], frame["text"], strict=True))
    print(f"{len(frame)} pairs of {frame['qid'].nunique()} queries; folder {folder}")

    kw = {} if args.batch_size is None else {"batch_size": args.batch_size}
    systems = {}
    wanted = args.systems.split(",")
    gpu = device.startswith("cuda")
    if not gpu:
        from pyterrier_tite.devices import cpu_has_native_bf16

        if not cpu_has_native_bf16():  # emulated bf16: several times slower than fp32, nothing to compare
            wanted = [w for w in wanted if not w.endswith("bf16")]
    else:
        skipped = [w for w in wanted if w.endswith("int8")]
        wanted = [w for w in wanted if w not in skipped]
        if skipped:
            print(f"CPU-only, skipped on {device}: {', '.join(skipped)}")
    fp32 = {"dtype": torch.float32} if gpu else {}  # ours default to bf16 autocast on a GPU
    if "ce" in wanted or "ce-bf16" in wanted:
        from sentence_transformers import CrossEncoder

        def predict(model):
            return lambda: np.asarray(model.predict(pairs, activation_fn=torch.nn.Identity(), **kw))

    if "ce" in wanted:
        ce = CrossEncoder(folder, device=device)
        systems["CrossEncoder (torch fp32)"] = predict(ce)
    if "ce-bf16" in wanted:
        half = CrossEncoder(folder, device=device, model_kwargs={"dtype": torch.bfloat16})
        print(f"CrossEncoder bf16: parameters in {next(half.parameters()).dtype}")
        systems["CrossEncoder (torch bf16)"] = predict(half)

    def ours(reranker):
        return lambda: (
            reranker.transform(frame)
            .set_index(["qid", "docno"])["score"]
            .reindex(list(zip(frame["qid"], frame["docno"], strict=True)))
            .to_numpy()
        )

    if "mono" in wanted:
        systems["MonoCE fp32"] = ours(t.MonoCE(folder, device=device, **fp32, **kw))
    if "mono-int8" in wanted:
        try:
            systems["MonoCE int8"] = ours(t.MonoCE(folder, device="cpu", dtype="int8", **kw))
        except (ValueError, TypeError) as e:
            print(f"MonoCE int8: unavailable ({e})")
    if "mono-bf16" in wanted:  # pays only where the CPU computes bf16 natively (AVX512_BF16 / AMX); else it warns
        systems["MonoCE bf16"] = ours(t.MonoCE(folder, device=device, dtype=torch.bfloat16, **kw))
    if "sparse4" in wanted:
        systems["SparseCE w=4 fp32"] = ours(t.SparseCE(folder, w=4, device=device, **fp32, **kw))
    if "sparse4-bf16" in wanted:
        systems["SparseCE w=4 bf16"] = ours(t.SparseCE(folder, w=4, device=device, dtype=torch.bfloat16, **kw))
    if "sparse4-int8" in wanted:
        systems["SparseCE w=4 int8"] = ours(t.SparseCE(folder, w=4, device="cpu", dtype="int8", **kw))
    if "celi" in wanted:
        systems["CELI fp32 (fresh head)"] = ours(t.CELI(folder, device=device, **fp32, **kw))

    dense = {}  # BM25 >> a bi-encoder as the re-ranker, ours against pyterrier_dr (same folder): name -> reference
    for precision in ("fp32", "bf16"):
        if ("dense" if precision == "fp32" else "dense-bf16") not in wanted:
            continue
        import pyterrier_dr

        from pyterrier_tite.start_points import resolve

        start, bf16 = resolve("minilm"), precision == "bf16"
        theirs = pyterrier_dr.SBertBiEncoder(start, device=device)
        if bf16:
            theirs.model.to(torch.bfloat16)  # bf16 weights, as the CrossEncoder's
        reference = f"pyterrier_dr SBertBiEncoder {precision}"
        dtype = {"dtype": torch.bfloat16} if bf16 else fp32
        systems[reference] = ours(theirs.scorer())
        systems[f"BertBiEncoder {precision}"] = ours(t.BertBiEncoder(start, device=device, **dtype).scorer())
        dense |= {reference: reference, f"BertBiEncoder {precision}": reference}

    best = dict.fromkeys(systems, float("inf"))
    scores = {}
    for _ in range(args.rounds):
        for name, fn in systems.items():
            start = time.perf_counter()
            scores[name] = fn()
            best[name] = min(best[name], time.perf_counter() - start)

    if args.anchors:  # after ours, on the same candidates; their own torch CrossEncoder ties the two timings
        for name, got in anchor_systems(args.anchors, folder, frame, args.rounds).items():
            if "error" in got:
                print(f"{name} [anchors]: unavailable ({got['error']})")
                continue
            systems[f"{name} [anchors]"] = None
            best[f"{name} [anchors]"], scores[f"{name} [anchors]"] = got["seconds"], np.asarray(got["scores"])

    qids = frame["qid"].to_numpy()
    config = json.load(open(os.path.join(folder, "config.json")))
    work = linear_work(frame, folder, int(config["num_hidden_layers"]))
    limits = {name: work["CrossEncoder"] / work[name] for name in ("MonoCE", "SparseCE")}
    print(
        f"linear-layer work, CrossEncoder over ours (the speed ratio the FLOPs allow): MonoCE {limits['MonoCE']:.2f}x, "
        f"SparseCE w=4 {limits['SparseCE']:.2f}x"
    )
    print("speed: against the CrossEncoder at the same precision (int8: fp32), a bi-encoder against pyterrier_dr's")
    print(f"{'system':<32} {'ms/pair':>8} {'speed':>7} {'of limit':>9} {'Spearman min':>13} {'mean':>7}")
    for name in systems:
        same = f"CrossEncoder (torch {'bf16' if 'bf16' in name else 'fp32'})"
        reference = dense.get(name) or (same if same in systems else next(iter(systems)))
        if name in dense and name == reference:
            print(f"-- BM25 >> a bi-encoder, reference: {name}")
        rho = [spearmanr(scores[name][qids == q], scores[reference][qids == q]).statistic for q in dict.fromkeys(qids)]
        ms, ratio = 1000 * best[name] / len(frame), best[reference] / best[name]
        limit = next((limits[k] for k in limits if name.startswith(k) and "int8" not in name), None)
        share = f"{ratio / limit:8.0%}" if limit and reference.startswith("CrossEncoder") else f"{'':>8}"
        print(f"{name:<32} {ms:8.2f} {ratio:6.2f}x {share} {min(rho):13.4f} {np.mean(rho):7.4f}")
    reduced = [("MonoCE int8", "MonoCE fp32"), ("MonoCE bf16", "MonoCE fp32"),
               ("SparseCE w=4 int8", "SparseCE w=4 fp32"), ("SparseCE w=4 bf16", "SparseCE w=4 fp32"),
               ("CrossEncoder (torch bf16)", "CrossEncoder (torch fp32)"), ("MonoCE int8", "MonoCE bf16"),
               ("SparseCE w=4 int8", "SparseCE w=4 bf16")]  # fmt: skip
    for low, fp32 in reduced:
        if low in scores and fp32 in scores:
            rho = [spearmanr(scores[low][qids == q], scores[fp32][qids == q]).statistic for q in dict.fromkeys(qids)]
            speed = best[fp32] / best[low]
            print(f"{low} vs {fp32}: {speed:.2f}x, Spearman per query min {min(rho):.4f}, mean {np.mean(rho):.4f}")


if __name__ == "__main__":
    main()
