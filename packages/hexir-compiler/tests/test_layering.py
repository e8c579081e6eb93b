"""The compiler's layers depend only downward, and the facts several layers share are written
once.

Read from the sources with `ast` (every import, a function's lazy ones included), so a module
that reaches up a layer fails here before it makes an import cycle or drags a layer's
dependencies into one below it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGES = Path(__file__).resolve().parents[2]
SOURCE = PACKAGES / "hexir-compiler" / "src"

#: Bottom to top: a module may import its own layer and those below it, never one above.
LAYERS = [
    ("base", ["__about__", "errors", "element_types", "mlir", "symbolic", "packing"]),
    ("op registry", ["ops"]),
    ("placement", ["placement"]),
    ("dialects", ["dialects"]),
    ("targets", ["target"]),
    ("kernel generators and frontends", ["transforms.tir", "frontend"]),
    ("passes", ["transforms"]),
    ("module builders", ["builtin", "serialize"]),
    ("pipeline", ["pipeline"]),
    ("commands and the package's API", ["cli", "__main__", "transforms.__main__", ""]),
]


def _layer(module: str) -> int:
    """The layer of `module` (dotted, without `hexir_compiler.`; "" is the package itself):
    that of its longest listed prefix."""
    best, found = -1, None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".") or prefix == "") \
                    and len(prefix) > best:
                best, found = len(prefix), index
    assert found is not None, f"hexir_compiler.{module} is in no layer"
    return found


def _modules() -> dict[str, Path]:
    root = SOURCE / "hexir_compiler"
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(path: Path, modules: dict[str, Path], header: bool = False) -> set[str]:
    """The hexir_compiler modules `path` imports (a name imported from a package is its
    submodule where it is one, else the package); with `header`, only those its first
    statements import, before any definition (what it needs to be defined at all)."""
    found = set()
    tree = ast.parse(path.read_text(), str(path))
    nodes = ast.walk(tree)
    if header:
        nodes = iter([])
        for index, statement in enumerate(tree.body):
            if isinstance(statement, ast.FunctionDef | ast.ClassDef):
                nodes = iter(tree.body[:index])
                break
        else:
            nodes = iter(tree.body)
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}".
                     removeprefix("hexir_compiler.") in modules else node.module
                     for alias in node.names]
        else:
            continue
        for name in names:
            if name == "hexir_compiler" or name.startswith("hexir_compiler."):
                found.add(name.removeprefix("hexir_compiler").removeprefix("."))
    return found


def test_every_import_runs_down_the_layers():
    modules = _modules()
    upward = []
    for module, path in modules.items():
        for imported in _imports(path, modules):
            if _layer(imported) > _layer(module):
                upward.append(f"{module or 'hexir_compiler'} ({LAYERS[_layer(module)][0]}) "
                              f"imports {imported} ({LAYERS[_layer(imported)][0]})")
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    """Among the imports a module needs to be defined: an import inside a function runs when
    it is called, and one after the definitions registers the importing module's additions
    to a table (the ONNX handlers), so neither can find a module half-defined."""
    modules = _modules()
    graph = {m: _imports(p, modules, header=True) - {m} for m, p in modules.items()}
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for imported in sorted(graph.get(module, ())):
            if state.get(imported) == 1:
                cycle = [*path[path.index(imported):], imported] if imported in path else \
                    [*path, imported]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if imported not in state:
                visit(imported, [*path, imported])
        state[module] = 2

    # A package imports its submodules and they import it by name (from hexir_compiler
    # import x): that edge is Python's own order, not a cycle, so packages are left out.
    packages = {m for m, p in modules.items() if p.name == "__init__.py"}
    graph = {m: deps - packages for m, deps in graph.items() if m not in packages}
    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


@pytest.mark.parametrize("package, forbidden", [
    ("hexir-format", ("hexir_compiler", "hexir_runtime", "hxb_dump")),
    ("hexir-runtime", ("hexir_compiler", "hxb_dump")),
    ("hxb-dump", ("hexir_compiler",)),
])
def test_packages_below_the_compiler_do_not_import_it(package, forbidden):
    found = []
    for path in sorted((PACKAGES / package / "src").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] in forbidden]
    assert not found


#: Facts more than one layer or package uses, each to be assigned in exactly one module.
SHARED = ["NAME_BYTES", "MAX_NAME", "MAX_GRID", "MAX_BLOCK", "MAX_BLOCK_THREADS", "BASE_ARCH",
          "DEVICES", "DEFAULT_DEVICE", "UNARY", "BINARY", "GELU_APPROXIMATIONS", "ELEMENTWISE",
          "CONTRACTIONS", "REDUCTIONS", "KERNEL_OPS"]


def test_shared_facts_are_defined_once():
    where: dict[str, list[str]] = {name: [] for name in SHARED}
    for path in sorted(PACKAGES.glob("*/src/**/*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name) and leaf.id in where:
                        where[leaf.id].append(str(path.relative_to(PACKAGES)))
    twice = {name: paths for name, paths in where.items() if len(paths) != 1}
    assert not twice


def test_every_op_with_a_kernel_has_a_plan_and_a_formula():
    from hexir_compiler import ops
    from hexir_compiler.placement import PLACEABLE
    from hexir_compiler.transforms.tir import PLANS
    from hexir_compiler.transforms.tir.elementwise import FORMULAS

    assert set(PLANS) == ops.KERNEL_OPS
    assert set(FORMULAS) == {*ops.UNARY, *ops.BINARY}
    assert set(PLACEABLE) == {f"hexir.{name}" for name in ops.KERNEL_OPS}
