"""``python -m experiments.teacher_selection --config experiments/teacher_selection/config.toml [--flag ...]``"""

import sys

from experiments.teacher_selection.selection import main

sys.exit(main())
