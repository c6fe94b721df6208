"""TITE: a bi-encoder whose layers pool the sequence to one vector (configuration, modeling, layers, conversion from
BERT and from the released layouts). Modules are imported by name: this file imports nothing, so a family can use
another's tokenization without loading its models."""
