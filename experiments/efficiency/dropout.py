"""ATen's dropout vs the counter-based CPU kernel (``pyterrier_tite.ops.dropout``), measured in one run: dropout alone
on a training-sized activation, and whole training steps (forward, backward, AdamW) of a SparseCE w=4 and of a
monoBERT cross-encoder at MiniLM size in train mode (hidden and attention dropout 0.1), as the training commands run
them (bf16 autocast where the CPU computes bf16 natively, else fp32).

The two arms alternate repeat by repeat in one process (``PYTERRIER_TITE_BACKEND_DROPOUT=torch`` sends the same
modules to ``F.dropout``), so drift in the machine's load hits both; the table gives the median of each arm.

Run: ``python -m experiments.efficiency.dropout`` (``--threads``, ``--repeats``; ``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch

from pyterrier_tite.benchmarking import Setting, build
from pyterrier_tite.devices import cpu_has_native_bf16
from pyterrier_tite.ops import dropout, use_fast_dropout
from pyterrier_tite.ops._extension import has_csrc

NATIVE = {"PYTERRIER_TITE_BACKEND_DROPOUT": "torch"}


def dropout_case(shape: tuple[int, ...], dtype: torch.dtype) -> tuple[str, Callable]:
    x = torch.randn(shape).to(dtype)
    return f"dropout alone, {list(shape)} {str(dtype).replace('torch.', '')}", lambda: dropout(x, 0.1)


def step(model: torch.nn.Module, forward: Callable[[], torch.Tensor]) -> Callable:
    """forward -> cross-entropy over 8 docs per query -> backward -> AdamW (lr 0: the same weights every time)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)

    def run():
        logits = forward().float().view(-1, 8)
        torch.nn.functional.cross_entropy(logits, torch.zeros(len(logits), dtype=torch.long)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return run


def sparse_ce_case(queries: int, length: int) -> tuple[str, Callable]:
    setting = Setting("SparseCE w=4 asym", 4, False)
    model = build(setting, max_positions=512).train()
    use_fast_dropout(model)
    gen = torch.Generator().manual_seed(0)
    qs = [torch.randint(1000, 30000, (10,), generator=gen) for _ in range(queries)]
    docs = [list(torch.randint(1000, 30000, (8, length), generator=gen)) for _ in range(queries)]
    inputs = model.make_batch(qs, docs)
    return f"SparseCE w=4 step, {queries} queries x 8 docs of {length}", step(model, lambda: model(inputs).logits)


def mono_case(queries: int, length: int) -> tuple[str, Callable]:
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
                        num_labels=1, attn_implementation="sdpa")  # fmt: skip
    model = BertForSequenceClassification(config).train()
    use_fast_dropout(model)
    ids = torch.randint(1000, 30000, (queries * 8, length + 12), generator=torch.Generator().manual_seed(0))
    return f"monoBERT step, {queries} queries x 8 docs of {length}", step(model, lambda: model(ids).logits)


def timed(run: Callable, autocast: bool) -> float:
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        run()
    return time.perf_counter() - start


def alternate(run: Callable, repeats: int, autocast: bool) -> tuple[float, float]:
    """Median seconds of (ATen dropout, kernel), one repeat of each in turn after a warm-up of both."""
    times: dict[bool, list[float]] = {True: [], False: []}
    for i in range(repeats + 1):
        for native in (True, False):
            if native:
                os.environ.update(NATIVE)
            try:
                elapsed = timed(run, autocast)
            finally:
                for key in NATIVE:
                    os.environ.pop(key, None)
            if i:
                times[native].append(elapsed)
    return statistics.median(times[True]), statistics.median(times[False])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    args = parser.parse_args(argv)
    if not has_csrc():
        raise SystemExit("the compiled CPU kernels are not available (see the warning above; pyterrier-tite doctor)")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    bf16 = cpu_has_native_bf16()
    queries, length = (1, 16) if args.quick else (4, 164)
    cases = [
        (*dropout_case((queries * 8, length, 384), torch.float32), False),
        (*dropout_case((queries * 8, length, 384), torch.bfloat16), False),
        (*sparse_ce_case(queries, length), bf16),
        (*mono_case(queries, length), bf16),
    ]
    print(f"threads {torch.get_num_threads()}; training steps in {'bf16' if bf16 else 'fp32'}")
    print("| case | ATen dropout ms | kernel ms | speed-up | share of the step saved |")
    print("|---|---|---|---|---|")
    for name, run, autocast in cases:
        native, kernel = alternate(run, args.repeats, autocast)
        print(f"| {name} | {1e3 * native:.1f} | {1e3 * kernel:.1f} | {native / kernel:.2f}x | "
              f"{(native - kernel) / native:.0%} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
