"""Print each cuda executable of a .hxb with its launch geometry and the parts of its image."""

import sys

import hexir_format
from hexir_format.images import flavour, parts

module = hexir_format.parse(open(sys.argv[1], "rb").read())
for exe in module.executables:
    if exe.image is None:
        print(f"{exe.name} descriptor")
        continue
    image = bytes(exe.image)
    print(f"{exe.name} {flavour(image)} grid {exe.grid} block {exe.block}")
    for part in parts(image):
        print(f"  {part.kind} sm_{part.arch}: {' '.join(part.kernels)}")
