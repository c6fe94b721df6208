"""Reranker efficiency: time and peak memory per document of the sparse cross-encoder against full attention.

MiniLM-L6 dimensions (384 hidden, 12 heads, 1536 FFN, 6 layers; random weights, fp32, inference), random token ids,
one query of ``--query-length`` tokens with a batch of passages (``--passage-length``) or documents
(``--document-length``). Configurations: a ``transformers`` ``BertForSequenceClassification`` with SDPA (the
baseline), and ``SparseCrossEncoder`` with full attention (w=inf), w=64 and w=4, each symmetric (the query also sees
[CLS] and the doc, encoded per pair) and asymmetric (the query sees only itself, encoded once per batch).

Per configuration it prints milliseconds and MiB of peak memory per document, the measured speed-up and memory
saving against the baseline (all from this one run), and the FLOP-ratio limit: FLOPs of the full-attention model
over FLOPs of the configuration (linear layers + attention, multiply-add = 2), i.e. the speed-up a perfect kernel
would give. Peak memory is the highest net allocation during one forward pass (torch profiler memory events), the
model weights and inputs not included; for CUDA-graph rows (``--cuda-graphs``) it is the memory the capture reserved
(the graph's pool, inputs and outputs, in 2 MiB segments).
Run: ``python benchmarks/rerank_efficiency.py`` (see ``--help``).
"""

from __future__ import annotations

import argparse

import torch

from pyterrier_tite.benchmarking import MINILM, Setting, best_time, build, peak_bytes, runner  # noqa: F401

SETTINGS = [
    Setting("BERT SDPA (baseline)", None, True, baseline=True),
    Setting("SparseCE w=inf sym", None, True),
    Setting("SparseCE w=inf asym", None, False),
    Setting("SparseCE w=64 sym", 64, True),
    Setting("SparseCE w=64 asym", 64, False),
    Setting("SparseCE w=4 sym", 4, True),
    Setting("SparseCE w=4 asym", 4, False),
]


def flops_per_doc(setting: Setting, query: int, doc: int, batch: int, hidden: int, ffn: int, layers: int) -> float:
    """Forward FLOPs per doc: linear layers (QKV, output, FFN) per token + 4 H per (row, key) of attention.

    Segments include their special tokens ([CLS]; query + [SEP]; doc + [SEP]). An asymmetric query is encoded once
    per batch, so its cost is shared by the batch's docs.
    """
    q, d = query + 1, doc + 1
    linear = 8 * hidden * hidden + 4 * hidden * ffn
    attention = 4 * hidden
    if setting.baseline or (setting.window is None and setting.symmetric):
        n = 1 + q + d
        return layers * (n * linear + n * n * attention)
    band = d if setting.window is None else min(d, 2 * setting.window + 1)
    cls_keys = 1 + q + d
    doc_keys = band + 1 + q
    query_keys = 1 + q + d if setting.symmetric else q
    query_share = 1.0 if setting.symmetric else 1.0 / batch
    tokens = 1 + d + q * query_share
    keys = cls_keys + d * doc_keys + q * query_keys * query_share
    return layers * (tokens * linear + keys * attention)








def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--query-length", type=int, default=10)
    parser.add_argument("--passage-length", type=int, default=164)
    parser.add_argument("--document-length", type=int, default=4086)
    parser.add_argument("--passage-batch", type=int, default=16)
    parser.add_argument("--document-batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per passage setting (best counts)")
    parser.add_argument("--document-repeats", type=int, default=1, help="timed runs per document setting")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (the machine is shared)")
    parser.add_argument("--only", choices=["passages", "documents"], default=None)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16")
    parser.add_argument(
        "--baseline-attention",
        choices=["sdpa", "eager"],
        default="sdpa",
        help="attention of the BERT baseline: sdpa (fused kernels) or eager (materialised L x L, the reference's way)",
    )
    parser.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="GPU: every configuration also replayed from CUDA graphs (rows marked 'graphed'; the speed-up column "
        "stays against the eager baseline)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    if device.type == "cuda":
        where, timing = torch.cuda.get_device_name(), "median (CUDA events)"
    else:
        where, timing = f"CPU, {args.threads} thread(s)", "best"
    print(
        f"# {where}, {args.dtype}, inference, MiniLM-L6 dims, random weights; query {args.query_length} tokens; "
        f"timed runs: {timing} of {args.repeats} (passages) / {args.document_repeats} (documents) after a warm-up"
    )
    workloads = [("passage", args.passage_length, args.passage_batch, args.repeats),
                 ("document", args.document_length, args.document_batch, args.document_repeats)]  # fmt: skip
    if args.only:
        workloads = [w for w in workloads if w[0] == args.only[:-1]]
    header = (
        "| input | configuration | ms / doc | MiB / doc | speed-up vs baseline | memory vs baseline "
        "| FLOP-ratio limit | % of limit |"
    )
    print(header + "\n|" + "---|" * 8)
    for kind, length, batch, repeats in workloads:
        max_positions = args.query_length + length + 8
        query = torch.randint(1000, 29000, (1, args.query_length))
        docs = torch.randint(1000, 29000, (batch, length))
        full_flops = flops_per_doc(SETTINGS[0], args.query_length, length, batch, 384, 1536, 6)
        base_time = base_mem = None
        runs = [(s, False) for s in SETTINGS]
        # graphs where the product replays them (docs up to SparseCEGraphs.max_doc_length); the HF capture last
        if args.cuda_graphs and device.type == "cuda" and length <= 1024:
            runs += [(s, True) for s in SETTINGS[1:]] + [(SETTINGS[0], True)]
        for setting, graphed in runs:
            model = build(setting, max_positions, args.baseline_attention).to(device, dtype)
            if graphed:  # a graph allocates nothing when replayed: its memory is what the capture reserved
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                reserved = torch.cuda.memory_reserved()
            try:
                run = runner(model, setting, query, docs, graphs=graphed)
                run()
            except RuntimeError as error:
                print(f"| {kind} | {setting.name} graphed | capture failed: {str(error)[:200]} |", flush=True)
                continue
            seconds = best_time(run, repeats, 0.0, device) / batch
            if graphed:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                memory = (torch.cuda.memory_reserved() - reserved) / batch / 2**20
            else:
                memory = peak_bytes(run, device) / batch / 2**20
            if setting.baseline and not graphed:
                base_time, base_mem = seconds, memory
            limit = full_flops / flops_per_doc(setting, args.query_length, length, batch, 384, 1536, 6)
            speedup = base_time / seconds
            name = setting.name.replace("SDPA", args.baseline_attention) if setting.baseline else setting.name
            print(
                f"| {kind} {args.query_length}+{length} (batch {batch}) "
                f"| {name}{' graphed' if graphed else ''} "
                f"| {seconds * 1e3:.2f} "
                f"| {memory:.2f} | {speedup:.2f}x | {base_mem / memory:.2f}x less | {limit:.2f} "
                f"| {100 * speedup / limit:.0f}% |",
                flush=True,
            )
            del model, run


if __name__ == "__main__":
    main()
