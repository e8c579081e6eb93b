"""Print a .hxb module's version, commands, slots and executables, one per line, for FileCheck."""

import sys
from pathlib import Path

import hexir_format as hf

module = hf.parse(Path(sys.argv[1]).read_bytes())
print(f"version {module.version}")
for function in module.functions:
    level = f" {hf.CPU_LEVELS[function.cpu_level]}" if function.cpu_level else ""
    print(f"function {function.name}{level}")
    for command in function.commands:
        print(f"  {command}")
for i, slot in enumerate(module.slots):
    print(f"slot {i} {slot.device} {slot.type}")
for exe in module.executables:
    image = f"image {len(exe.image)} bytes" if exe.image is not None else "descriptor"
    print(
        f"executable {exe.name} {exe.kind} {exe.device} "
        f"({', '.join(map(str, exe.args))}) params {list(exe.params)} {image}"
        f" grid {exe.grid} block {exe.block}"
    )
