"""PyTerrier transformers: the only layer of the package that knows DataFrames."""
