"""``python -m experiments.baselines [--config FILE] [--collections ...]``: the BM25 table as Markdown."""

import sys

from experiments.baselines.bm25 import main

sys.exit(main())
