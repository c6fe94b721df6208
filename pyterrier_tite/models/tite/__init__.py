"""TITE: a bi-encoder whose layers pool a text to one vector (imports nothing: a module loads what it needs)."""
