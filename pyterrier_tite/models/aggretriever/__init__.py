"""Aggretriever: aggregated MLM term weights concatenated with a projected [CLS], and the pyserini / dhr layouts.
Modules are imported by name: this file imports nothing, so a family can use another's tokenization without loading
its models."""
