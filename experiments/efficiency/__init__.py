"""The efficiency study: ratios measured within one run of a script (``benchmarks/`` and the study-only ones here:
``dropout``, ``cpu_allocator``, ``score_ties``, run as ``python -m experiments.efficiency.<name>``)."""
