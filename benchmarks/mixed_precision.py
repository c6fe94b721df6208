"""fp32 vs bf16 on this CPU, measured in one run: TITE encoding, the sparse cross-encoder on passages and on 4k-token
documents, and one training step of the sparse cross-encoder; plus the CPU features that decide whether bf16 pays.

bf16 runs under ``torch.autocast("cpu", torch.bfloat16)`` with fp32 weights (what ``dtype=torch.bfloat16`` on the
models does: matrix products in bf16, softmax statistics, norms and losses in fp32). The agreement columns compare
the bf16 outputs with the fp32 ones on the same inputs: max abs difference relative to the outputs' range, and the
Spearman correlation of the scores (what ranking cares about). MiniLM dimensions, random weights and token ids.

Run: ``python benchmarks/mixed_precision.py`` (``--threads``, ``--repeats``; ``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from encode_throughput import make_tite, one_vector, tite_variants  # noqa: E402
from rerank_efficiency import SETTINGS, build, runner  # noqa: E402

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}


def cpu_features() -> dict[str, object]:
    """What this CPU offers for bf16: AVX-512 BF16 / AMX tiles give native bf16 products, otherwise bf16 is emulated."""
    flags: set[str] = set()
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
                if line.startswith("model name") and model == "unknown":
                    model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {
        "cpu": model,
        "torch capability": torch.backends.cpu.get_cpu_capability(),
        "avx2": "avx2" in flags,
        "avx512f": "avx512f" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "amx_bf16": "amx_bf16" in flags,
        "threads": torch.get_num_threads(),
    }


def timed(run: Callable[[], torch.Tensor], dtype: torch.dtype | None, repeats: int) -> float:
    """Best wall time of ``repeats`` runs after one warm-up."""
    def call():
        if dtype is None:
            return run()
        with torch.autocast("cpu", dtype=dtype):
            return run()

    call()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def tite_case(num_docs: int, length: int) -> tuple[str, Callable]:
    variant = tite_variants(layers=6, width=384)["tite-late"]
    model = make_tite({**variant, "kernels": one_vector(variant["kernels"])}, vocab=30522, max_len=512)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (num_docs, length), generator=gen)
    mask = torch.ones_like(ids)

    def run():
        with torch.no_grad():
            return model(ids, mask).last_hidden_state[:, 0]

    return f"TITE-late encode {num_docs} x {length} tokens", run


def rerank_case(length: int, batch: int, query: int = 10) -> tuple[str, Callable]:
    setting = next(s for s in SETTINGS if s.name == "SparseCE w=4 asym")
    model = build(setting, max_positions=max(512, query + length + 3))
    gen = torch.Generator().manual_seed(0)
    q = torch.randint(1000, 30000, (1, query), generator=gen)
    docs = torch.randint(1000, 30000, (batch, length), generator=gen)
    return f"SparseCE w=4: {batch} x {length}-token docs", runner(model, setting, q, docs)


def training_case(length: int, batch: int, query: int = 10) -> tuple[str, Callable]:
    """One forward + backward + AdamW step."""
    setting = next(s for s in SETTINGS if s.name == "SparseCE w=4 asym")
    model = build(setting, max_positions=max(512, query + length + 3))  # eval(): no dropout, so fp32 and bf16
    # steps see the same network; gradients flow as in training
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)  # lr 0: every repeat runs the same weights
    gen = torch.Generator().manual_seed(0)
    q = torch.randint(1000, 30000, (query,), generator=gen)
    docs = torch.randint(1000, 30000, (batch, length), generator=gen)
    inputs = model.make_batch([q], [list(docs)])
    labels = torch.zeros(1, dtype=torch.long)

    def run():
        logits = model(inputs).logits.view(1, -1)
        loss = torch.nn.functional.cross_entropy(logits.float(), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return logits.detach()

    return f"SparseCE w=4 training step ({batch} docs of {length})", run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    features = cpu_features()
    print("CPU:", ", ".join(f"{k} {v}" for k, v in features.items()))
    small = args.quick
    cases = [
        tite_case(16 if small else 64, 64 if small else 256),
        rerank_case(32 if small else 164, 16),
        rerank_case(256 if small else 4086, 4),
        training_case(32 if small else 164, 16),
    ]
    print("\n| case | fp32 ms | bf16 ms | bf16 speed-up |")
    print("|---|---|---|---|")
    for name, run in cases:
        fp32_time = timed(run, None, args.repeats)
        bf16_time = timed(run, torch.bfloat16, args.repeats)
        print(f"| {name} | {1e3 * fp32_time:.1f} | {1e3 * bf16_time:.1f} | {fp32_time / bf16_time:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
