"""``python -m experiments.distill_tite --config experiments/distill_tite/config.toml [--flag ...]``"""

import sys

from experiments.distill_tite.recipe import main

sys.exit(main())
