"""``python -m experiments.splade_from_scratch --config experiments/splade_from_scratch/config.toml [--flag ...]``"""

import sys

from experiments.splade_from_scratch.recipe import main

sys.exit(main())
