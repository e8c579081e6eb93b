"""The text listing of a module's facts, in the earlier tool's format.

Version 3 modules print exactly as `tools/hxb-dump.py` printed them; version 4 adds the slots,
entry-point signatures, typed rodata, argument types and params; version 5 the names of an
entry's inputs and outputs in its signature, where the module names them; version 6 a dynamic
module's size symbols and their ranges, and the expressions its types, ALLOCs and launch
grids hold, and the symbols each kernel receives. Each part prints
only when its facts are there, which is how a damaged file gets its header and section table
(or just its size) and nothing that was not safe to read.
"""

from __future__ import annotations

from hexir_format import DType, printable
from hxb_dump.facts import Facts
from hxb_dump.params import render as render_params

VALUES_PER_ROW = 4
NO_IMAGE = "none -- the runtime supplies the body"
STRINGS_SHOWN = 16  # of the string table, without --rodata
STRING_CHARS = 60  # of one string


def render(facts: Facts, *, rodata: bool = False) -> list[str]:
    """The listing, line by line; with `rodata`, the constants' values too (the facts must
    have been gathered with values)."""
    return [printable(line) for line in _render(facts, rodata)]


def _render(facts: Facts, rodata: bool) -> list[str]:
    if "size" not in facts:  # the file could not be read at all
        return []
    lines = [f"{facts['file']}  ({facts['size']} bytes)"]
    if "sections" not in facts:
        return lines
    lines += _sections(facts)
    if "functions" not in facts:
        return lines
    typed = facts["version"] >= 4
    lines += _symbols(facts["functions"])
    lines += _sizes(facts.get("symbols", []))
    lines += _strings(facts.get("strings", []), everything=rodata)
    lines += _generations(facts.get("generations", []))
    if typed:
        lines += _slots(facts["slots"])
    lines += _program(facts["functions"], typed)
    lines += _plan(facts.get("plan", []))
    lines += _rodata(facts["rodata"], typed, rodata)
    lines += _executables(facts["executables"], typed)
    return lines


def _sections(facts: Facts) -> list[str]:
    sections = facts["sections"]
    lines = [f"version {facts['version']}, flags 0x{facts['flags']:x}, {len(sections)} sections"]
    lines += [f"  {s['name']:<12} offset={s['offset']:<8} size={s['size']}" for s in sections]
    return lines


def _symbols(functions: list[Facts]) -> list[str]:
    return ["", "symbols", *(f"  {f['name']:<20} program+{f['program_offset']}"
                             + (f"  for {f['target']}" if f.get("target") else "")
                             for f in functions)]


def _sizes(symbols: list[Facts]) -> list[str]:
    """A dynamic module's size symbols and the range of each."""
    if not symbols:
        return []
    return ["", f"size symbols  ({len(symbols)})",
            *(f"  {s['name']:<20} {s['lo']}..{s['hi']}" for s in symbols)]


def _strings(strings: list[str], everything: bool) -> list[str]:
    """The module's string table: the first STRINGS_SHOWN (every one with `--rodata`), each
    quoted and escaped, a long one cut at STRING_CHARS characters."""
    if not strings:
        return []
    shown = strings if everything else strings[:STRINGS_SHOWN]
    lines = ["", f"strings  ({len(strings)})",
             *(f"  #{h:<5} {_quoted(text)}" for h, text in enumerate(shown))]
    if len(shown) < len(strings):
        lines.append(f"  ... {len(strings) - len(shown)} more (--rodata lists every one)")
    return lines


def _generations(generations: list[Facts]) -> list[str]:
    """Each generate entry point: the loop the runtime runs, the step's roles, the state."""
    if not generations:
        return []
    lines = ["", f"generate  ({len(generations)})"]
    for g in generations:
        eos = f"eos {g['eos']}" if g["eos"] >= 0 else "no eos"
        lines += [f"  {g['name']}(input_ids, max_new_tokens) -> (sequences): greedy decode loop "
                  f"over {g['step']}, {eos}, at most {g['max_length']} positions",
                  f"    prefill    {g['step']} on the prompt (past 0)",
                  f"    loop       argmax of the last logits; {g['step']} on it (seq 1); until "
                  f"max_new_tokens or eos",
                  *(f"    {role:<10} {side} {_role(g[role])}" for role, side in
                    (("ids", "input"), ("mask", "input"), ("positions", "input"),
                     ("logits", "output"))),
                  *(f"    state      cache {n}: input {_role(c['past'])} <- output "
                    f"{_role(c['present'])}" for n, c in enumerate(g["cache"]))]
    return lines


def _role(r: Facts) -> str:
    return f"{r['index']}" + (f" '{printable(r['name'])}'" if r.get("name") else "")


def _quoted(text: str) -> str:
    """`"monday"`: a control character escaped (`printable`), a quote too, cut at
    STRING_CHARS characters with how many there are."""
    if len(text) > STRING_CHARS:
        return _quoted(text[:STRING_CHARS]) + f"... ({len(text)} characters)"
    return '"' + printable(text).replace('"', '\\"') + '"'


def _slots(slots: list[Facts]) -> list[str]:
    return ["", f"slots  ({len(slots)})",
            *(f"  {'%' + str(s['index']):<6} {s['device']:<5} {s['type']}" for s in slots)]


def _program(functions: list[Facts], typed: bool) -> list[str]:
    lines = ["", "program"]
    for f in functions:
        level = f"  [{f['target']}]" if f.get("target") else ""
        lines.append(f"  {f['signature'] if typed else f['name']}:{level}")
        for c in f["commands"]:
            parts = [f"{name}={value}" for name, value in c["args"].items()]
            parts += [f"%{slot}" for slot in c["slots"]]
            lines.append(f"    {c['op']:<9} {' '.join(parts)}")
        lines.append("    end")
    return lines


def _plan(entries: list[Facts]) -> list[str]:
    """The memory plan: per entry and device, the arena against the sum of its intermediates,
    then each intermediate's offset in it."""
    if not entries:
        return []
    lines = ["", "memory plan"]
    for entry in entries:
        for device, arena in entry["arenas"].items():
            share = f", {arena['bytes'] / arena['sum']:.0%}" if arena["sum"] else ""
            lines.append(f"  {entry['function']}: {device} arena {arena['bytes']} bytes for "
                         f"{arena['count']} intermediates of {arena['sum']} bytes{share}")
            places = [f"%{slot}@{offset}" for slot, offset in arena["offsets"].items()]
            lines += [f"    {' '.join(places[i:i + 8])}" for i in range(0, len(places), 8)]
    return lines


def _rodata(facts: Facts, typed: bool, values: bool) -> list[str]:
    ranges = facts["ranges"]
    if not typed:
        (whole,) = ranges
        return ["", f"rodata  {facts['size']} bytes ({whole['count']} f64)",
                *(_rows(whole) if values else [])]
    noun = "constant" if len(ranges) == 1 else "constants"
    lines = ["", f"rodata  {facts['size']} bytes ({len(ranges)} {noun})"]
    if not values:
        return lines
    for r in ranges:
        noun = "slot" if len(r["slots"]) == 1 else "slots"
        slots = " ".join([noun, *(f"%{s}" for s in r["slots"])])
        what = r["type"] or "untyped (no such slot)"
        where = "" if "count" in r or r["type"] is None else "  (outside rodata)"
        lines.append(f"  +{r['offset']:<5} {r['bytes']} bytes  {what}  {slots}{where}")
        lines += _rows(r)
    return lines


def _rows(r: Facts) -> list[str]:
    values = r.get("values")
    if values is None:
        return []
    itemsize = DType.from_name(r["dtype"]).itemsize
    if r.get("strings") is not None:  # handles, each with the string it names
        return [f"    +{r['offset'] + i * itemsize:<5} #{h} "
                + (_quoted(text) if text is not None else "(no such string)")
                for i, (h, text) in enumerate(zip(values, r["strings"], strict=True))]
    return [f"    +{r['offset'] + i * itemsize:<5} "
            + "  ".join(map(_value, values[i:i + VALUES_PER_ROW]))
            for i in range(0, len(values), VALUES_PER_ROW)]


def _value(v: float) -> str:
    """A float as `%g`; an integer in full (an i64 may need every digit); an i1 as 1 or 0."""
    return f"{v:g}" if isinstance(v, float) else str(int(v))


def _executables(exes: list[Facts], typed: bool) -> list[str]:
    lines = ["", f"executables  ({len(exes)})"]
    for e in exes:
        extents = e["extents"]
        size = f"{extents['m']}x{extents['n']}x{extents['k']}  elem={extents['elem_size']}B" \
            if extents else ""
        if typed:
            *inputs, dest = e["args"]
            head = f"  {e['name']:<16} {e['kind']:<11} {e['device']:<5} " \
                   f"{', '.join(inputs)} -> {dest}"
            lines.append(f"{head}  {size}" if size else head)
        else:
            lines.append(f"  {e['name']:<16} {e['kind']:<6} {e['device']:<6}  {size}")
        if e["params"]:
            lines.append(f"    params         {render_params(e['params'])}")
        elif e["params"] is None:
            raw = ", ".join(f"{p:g}" for p in e["raw_params"]) or "none"
            lines.append(f"    params         {raw} (not valid for {e['kind']})")
        image = e["image"] or {}
        label = "host image  " if image.get("flavour") == "host object" else "device image"
        if e["kind"] == "library" and not image:
            lines.append(f"    library        {e['name']} (the runtime's own code, no image)")
        else:
            lines.append(f"    {label}   {_image(e)}")
        if e.get("operands"):
            lines.append(f"    operands       {', '.join(e['operands'])} (int64, after the "
                         "buffers)")
        if image.get("functions") is not None:
            needs = [f"{n} (the runtime's {n.removeprefix('hexir_rt_')} routine)"
                     if n.startswith("hexir_rt_") else n for n in image["undefined"]]
            lines.append(f"    symbols        defines {', '.join(image['functions']) or 'none'}; "
                         f"needs {', '.join(needs) or 'nothing'}")
    return lines


def _image(e: Facts) -> str:
    image = e["image"]
    if image is None:
        return NO_IMAGE
    flavour = image.get("format", image["flavour"])
    if image["target"]:
        flavour += f" ({image['target']})"
    elif image.get("contents"):
        entries = ", ".join(f"{c['kind']} {c['arch']}" for c in image["contents"])
        flavour += f" ({entries})"
    grid = ",".join(map(str, e["grid"]))
    block = ",".join(map(str, e["block"]))
    return f"{image['size']} bytes, {flavour}   launch grid=({grid}) block=({block})"
