"""BERT bi-encoders, and the base TITE and Aggretriever encode with (imports nothing: a module loads what it needs)."""
