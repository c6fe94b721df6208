"""Which launch settings of the Triton window-attention forward are fastest for the sparse cross-encoder's segments.

For each segment shape of MiniLM-sized reranking (12 heads, head dim 32, bf16): the doc segment of 4k-token documents
and of passages (band +-w, [CLS] and query as key groups) and the [CLS] row (one row, the doc as a key group), it times
every (BLOCK_M, BLOCK_N, BLOCK_G, warps) setting with CUDA events (median) and checks its output against the current
default's. It prints one table per shape, fastest first, with the default marked: what ``forward_config`` should pick.

    python benchmarks/window_attention_configs.py            # on a CUDA machine
"""

from __future__ import annotations

import argparse
import itertools

import torch
import triton.testing

from pyterrier_tite.ops import KeyGroup, window_attention
from pyterrier_tite.ops import window_attention_triton as wat

HEADS, DIM = 12, 32


def case(batch: int, length: int, window: int, groups: list[tuple[int, bool]], dtype: torch.dtype):
    """q, k, v [batch, H, length, D] and key groups of (keys, shared by all rows?)."""
    dev = torch.device("cuda")

    def rnd(rows: int, n: int) -> torch.Tensor:
        return torch.randn(rows, HEADS, n, DIM, device=dev, dtype=dtype)

    q, k, v = rnd(batch, length), rnd(batch, length), rnd(batch, length)
    lengths = torch.full((batch,), length, device=dev)
    key_groups = []
    for keys, shared in groups:
        rows = 1 if shared else batch
        index = torch.zeros(batch, dtype=torch.long, device=dev) if shared else None
        key_groups.append(KeyGroup(rnd(rows, keys), rnd(rows, keys), torch.full((rows,), keys, device=dev), index))
    return lambda: window_attention(q, k, v, window, lengths, key_groups, backend="triton")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--top", type=int, default=6)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    shapes = {
        "4k docs, doc segment w=4 (16 x 4087)": (16, 4087, 4, [(1, False), (11, True)]),
        "4k docs, doc segment w=64": (16, 4087, 64, [(1, False), (11, True)]),
        "4k docs, [CLS] row (doc group 4087)": (16, 1, 0, [(11, True), (4087, False)]),
        "passages, doc segment w=4 (64 x 165)": (64, 165, 4, [(1, False), (11, True)]),
        "passages, [CLS] row (doc group 165)": (64, 1, 0, [(11, True), (165, False)]),
        "passages, query segment sym (1 x 11)": (64, 11, 10, [(1, False), (165, False)]),
    }
    settings = [
        (bm, bn, bg, w)
        for bm, bn, bg, w in itertools.product((16, 32, 64, 128), (16, 32, 64), (16, 128), (1, 2, 4, 8))
        if bm * max(bn, bg) <= 128 * 64 and (w in (1, 2, 4) if bm <= 32 else w in (4, 8))
    ]
    print(f"# {torch.cuda.get_device_name()}, {args.dtype}, heads {HEADS}, head dim {DIM}; {len(settings)} settings")
    for name, (batch, length, window, groups) in shapes.items():
        run = case(batch, length, window, groups, dtype)
        wat.FORWARD_CONFIG = None
        default = wat.forward_config(length, window, max(g for g, _ in groups))
        reference = run().float()
        times = []
        for setting in settings:
            wat.FORWARD_CONFIG = setting
            out = run().float()
            error = ((out - reference).norm() / reference.norm()).item()
            if not error <= 2e-2:
                times.append((float("inf"), setting, error))
                continue
            times.append((triton.testing.do_bench(run, warmup=5, rep=20, return_mode="median"), setting, error))
        wat.FORWARD_CONFIG = None
        times.sort()
        base = next(t for t, s, _ in times if s == default)
        print(f"\n## {name}: default {default} {base * 1e3:.1f} us")
        print("| BLOCK_M, BLOCK_N, BLOCK_G, warps | us | vs default | rel. error |\n|---|---|---|---|")
        for t, setting, error in times[: args.top]:
            print(f"| {setting} | {t * 1e3:.1f} | {base / t:.2f}x | {error:.1e} |")
        bad = [s for t, s, _ in times if t == float("inf")]
        if bad:
            print(f"settings with wrong output: {bad}")


if __name__ == "__main__":
    main()
