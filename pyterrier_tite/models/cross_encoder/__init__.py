"""Cross-encoder scorers (MonoCE, CELI, and the scorer wrapping SparseCE): the two input layouts, score heads, the
query-grouped scoring loop and the readers of saved / released checkpoints. Modules are imported by name: this file
imports nothing, so a family can use another's tokenization without loading its models."""
