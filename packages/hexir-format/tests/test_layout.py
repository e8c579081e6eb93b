"""Each fixed struct is exactly the size the format documents."""

import pytest

from hexir_format import layout as L


@pytest.mark.parametrize(
    ("decl", "size"),
    [
        (L.Header, 24),
        (L.SectionEntry, 24),
        (L.Symbol, 40),
        (L.CommandHeader, 8),
        (L.ExecutablesHeader, 8),
        (L.ExecutableV3, 80),
        (L.ExecutableV4, 96),
        (L.TensorTypeEntry, 56),
        (L.SlotEntry, 64),
    ],
)
def test_sizeof(decl, size):
    assert decl.sizeof() == size


def test_align():
    assert [L.align(n) for n in (0, 1, 7, 8, 9, 120)] == [0, 8, 8, 8, 16, 120]
