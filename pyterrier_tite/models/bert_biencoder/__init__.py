"""CLS / mean-pooled BERT bi-encoders, and the texts-to-vectors base (tokenization, ``TextEncoder``) that TITE and
Aggretriever share. Modules are imported by name: this file imports nothing, so a family can use another's
tokenization without loading its models."""
