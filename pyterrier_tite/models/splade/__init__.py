"""SPLADE: max-pooled MLM term weights (imports nothing: a module loads what it needs)."""
