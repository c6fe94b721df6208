"""Package-level behaviour: the fallback without the compiled extension, and the command line."""

from __future__ import annotations

import subprocess
import sys

from pyterrier_tite.cli import main

NO_EXTENSION = """
import sys, warnings
sys.modules['pyterrier_tite._C'] = None          # makes `from pyterrier_tite import _C` raise ImportError
import torch
import pyterrier_tite as t
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    names = t.ops.backends()['packed_mean_pool']
    x = torch.randn(5, 3)
    out, cu = t.ops.packed_mean_pool(x, torch.tensor([0, 5], dtype=torch.int32), 2, 2)
print(names, out.shape[0], sum('compiled extension not available' in str(w.message) for w in caught))
"""


def test_missing_extension_falls_back_to_reference_with_one_warning():
    out = subprocess.run([sys.executable, "-c", NO_EXTENSION], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['torch'] 3 1"


def test_cli_backends_lists_compiled_pooling(capsys):
    assert main(["backends"]) == 0
    assert "packed_mean_pool: csrc-cpu" in capsys.readouterr().out


def test_cli_demo_prints_vaswani_table(irds_home, tite_cache, capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "nDCG@10" in out and "R@100" in out and "mrt" in out
    assert "0.4667" in out  # BM25 nDCG@10 on vaswani (../shared/DATA.md)
