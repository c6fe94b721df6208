"""The schematic every transformer of this package shows (``pt.schematic``, ``pt.inspect``, notebooks)."""

from __future__ import annotations


class NamedSchematic:
    """Label = the class name (<= 20 characters) and no ``help_url`` lookup: PyTerrier would download its
    documentation inventory to look for one, which does not list this package and fails offline (e.g. in TIREx)."""

    def schematic(self, *, input_columns=None) -> dict:
        return {"label": type(self).__name__, "help_url": None}
