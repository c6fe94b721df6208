"""What several studies share: ``pt.Experiment`` tables over seeds with paired tests, cached re-ranker scores, the
offline teacher, cross-validated systems, recipe helpers. Not part of the installed library."""
