"""benchmarks/distilled_tite_speed.py: its --structures list is parsed strictly, and refused beside --student."""

from __future__ import annotations

import pytest
from _scripts import load_script


def test_structures_parse_to_layers_and_kernels():
    bench = load_script("benchmarks/distilled_tite_speed.py")
    assert bench.parse_structures("4:2, 4:3,5:2") == [(4, 2), (4, 3), (5, 2)]


@pytest.mark.parametrize("spec", ["4-2", "4:x", "4:2:1", ""])
def test_a_malformed_structure_names_itself(spec):
    bench = load_script("benchmarks/distilled_tite_speed.py")
    with pytest.raises(ValueError, match="POOLING_LAYERS:KERNEL"):
        bench.parse_structures(spec)


def test_structures_beside_a_trained_student_are_refused(capsys):
    bench = load_script("benchmarks/distilled_tite_speed.py")
    with pytest.raises(SystemExit):
        bench.main(["--student", "some/folder", "--structures", "4:2"])
    assert "pick one" in capsys.readouterr().err
