import pandas as pd

from experiments.common.tables import markdown_table


def test_markdown_table_formats_floats_only():
    text = markdown_table(pd.DataFrame({"name": ["bm25"], "n": [3], "nDCG@10": [0.46671]}))
    assert text.splitlines() == ["| name | n | nDCG@10 |", "|---|---|---|", "| bm25 | 3 | 0.4667 |"]
