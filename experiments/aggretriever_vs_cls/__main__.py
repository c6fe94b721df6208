"""``python -m experiments.aggretriever_vs_cls --config experiments/aggretriever_vs_cls/config.toml [--flag ...]``"""

import sys

from experiments.aggretriever_vs_cls.recipe import main

sys.exit(main())
