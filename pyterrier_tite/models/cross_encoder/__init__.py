"""Cross-encoder scorers: MonoCE, CELI and the one around SparseCE (imports nothing: a module loads what it needs)."""
