"""SPLADE: tokenization of both sides, the MLM max-pooled encoder and its pooled-projection path. Modules are
imported by name: this file imports nothing, so a family can use another's tokenization without loading its models."""
