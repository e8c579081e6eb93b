"""The element types of Hexir's tensors, as MLIR writes them, grouped the way ops take them.

Here rather than in the dialect package so the op registry (`ops.py`), the dialect and the
kernel generators share one list.
"""

FLOATS: tuple[str, ...] = ("f32", "f64")
INTEGERS: tuple[str, ...] = ("i32", "i64")
NUMBERS = FLOATS + INTEGERS
#: Every element type a tensor may have (i1 is a bool).
ELEMENTS = (*NUMBERS, "i1")
#: The types bitwise ops take: integers, and bools (where and/or/xor/not are the logical ones).
BITS = (*INTEGERS, "i1")
#: A string: the element type of the tensors only the runtime's library kernels compute
#: (`hexir.string_normalizer`); in memory each element is an int64 handle into the call's
#: string table (`hexir_format.DType.STRING`). Not in ELEMENTS: no compiled kernel takes it.
STRING = "!hexir.string"
#: How kernels' buffers hold them (`tir.builder.storage`): a bool as a byte.
STORAGE = {"i1": "i8"}
