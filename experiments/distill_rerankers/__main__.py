"""``python -m experiments.distill_rerankers --config experiments/distill_rerankers/config.toml [--flag ...]``"""

import sys

from experiments.distill_rerankers.recipe import main

sys.exit(main())
