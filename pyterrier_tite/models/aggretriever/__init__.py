"""Aggretriever: aggregated MLM term weights with a projected [CLS] (imports nothing: a module loads what it needs)."""
