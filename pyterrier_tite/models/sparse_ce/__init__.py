"""The sparse (windowed, asymmetric) cross-encoder: configuration, grouped-key attention, modeling, CUDA graphs of
inference, and the readers of the released ``webis/sparse-cross-encoder-*`` layouts. Modules are imported by name:
this file imports nothing, so a family can use another's tokenization without loading its models."""
