"""The studies behind docs/results.md, one folder each (configuration, README, results as data). Not installed: they
use the library's public API and run from the repository root as ``python -m experiments.<name> --config ...``."""
