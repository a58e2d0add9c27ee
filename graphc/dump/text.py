"""The text views of graphc-dump: the summary, the memory timeline, one kernel's code."""
from runtime import shapes

from graphc.dump.model import DumpError


def summary(d, stage=None):
    lines = [_title(d)]
    if d.kind == "compiled":
        lines += _signature(d) + [""]
    ops = stage_ops(d, stage)
    lines += [f"{_stage_label(d, stage)}: {len(ops)} ops"]
    lines += op_table(ops, with_kernel=bool(d.kernels)) + [""]
    if d.kind == "compiled":
        lines += kernel_lines(d) + [""] + memory_lines(d, timeline=False) + [""] + pass_lines(d)
    elif getattr(d, "collections", None):
        lines.append("collections: " + ", ".join(f"{k} ({n})"
                                                 for k, n in sorted(d.collections.items())))
    return "\n".join(lines).rstrip("\n") + "\n"


def overview(d, stage=None):
    """The summary less its tables (ops, kernels, buffers): what a page shows elsewhere."""
    lines = [_title(d)]
    if d.kind == "compiled":
        lines += _signature(d) + [""]
    ops = stage_ops(d, stage)
    lines.append(f"{_stage_label(d, stage)}: {len(ops)} ops, {len(d.kernels)} kernels")
    if d.kind == "compiled":
        lines += [""] + memory_lines(d, timeline=False)[:1] + [""] + pass_lines(d)
    return "\n".join(lines) + "\n"


def _stage_label(d, stage):
    return {"graph": "graph", "before": "graph before passes",
            "after": "graph after passes"}[stage_name(d, stage)]


def stage_name(d, stage):
    if d.kind == "graph":
        if stage not in (None, "graph"):
            raise DumpError(f"{d.path} is a saved graph: it has no {stage!r} stage "
                            "(stages exist in compiled files)")
        return "graph"
    stage = stage or "after"
    if stage not in d.stages:
        raise DumpError(f"{d.path} does not record the graph {stage} the passes")
    return stage


def stage_ops(d, stage=None):
    return d.stages[stage_name(d, stage)]


def _title(d):
    kind = "compiled graph" if d.kind == "compiled" else "saved graph"
    return f"{kind} {d.path} (format {d.format_version})"


def _signature(d):
    t = d.target
    lines = [f"target: GPU {t['arch']}" if t.get("kind") == "gpu" else
             f"target: {t['triple']} cpu={t['cpu']}"]
    for what, key in (("input ", "inputs"), ("output", "outputs")):
        for e in d.signature[key]:
            lines.append(f"  {what} {e['name']}: {e['dtype']} {shapes.dims_text(e['dims'])}"
                         f"  ({e['tensor']})")
    for i, v in enumerate(d.variants):
        guards = "; ".join(v["guards"]) or "none"
        lines.append(f"  executable {i}: guards {guards}")
    for s in d.state:
        lines.append(f"  state {s['name']}: {s['dtype']} {s['shape']}")
    return lines


def op_table(ops, with_kernel):
    header = ["name", "type", "dtype", "shape", "inputs"] + (["kernel"] if with_kernel else [])
    rows = [header]
    for op in ops:
        row = [op.name, op.type, op.dtype, op.shape, ", ".join(op.inputs) or "-"]
        if with_kernel:
            row.append(",".join(map(str, op.kernels)) or "-")
        rows.append(row)
    return _table(rows)


def _table(rows, indent="  "):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def kernel_lines(d):
    lines = [f"kernels: {len(d.kernels)}"]
    names = {op.id: op.name for op in d.stages.get("after", [])}
    for i, k in enumerate(d.kernels):
        ops = ", ".join(names.get(n, f"%{n}") for n in k.get("nodes", []))
        extra = f" updates {', '.join(k['updates'])}" if k.get("updates") else ""
        if k.get("shares_code_of"):
            extra += f" (runs {k['shares_code_of']})"
        lines.append(f"  {i} {k['name']} ({k['kind']} {k['dims_text']}): {ops}{extra}")
    return lines


def _at_hints(d, expr):
    """'64*x.0 (512 at x.0=8)', or the int."""
    text = shapes.to_text(expr)
    if isinstance(expr, int) or not d.symbol_hints:
        return text
    try:
        value = shapes.evaluate(expr, d.symbol_hints)
    except (KeyError, ValueError, ArithmeticError):
        return text
    return f"{text} ({value})"


def memory_lines(d, timeline):
    plan = d.memory_plan
    if plan is None:
        return ["memory plan: none (no intermediate buffers planned)"]
    stats = plan["stats"]
    hints = ", ".join(f"{k}={v}" for k, v in sorted(d.symbol_hints.items()))
    lines = [f"memory plan: arena {_at_hints(d, plan['arena_bytes'])} bytes, sum of buffers "
             f"{_at_hints(d, stats.get('sum_of_buffers', 0))}, peak live "
             f"{_at_hints(d, stats.get('lower_bound', 0))}"
             + (f"  (values in parentheses at {hints})" if hints else "")]
    rows = [["buffer", "dtype", "shape", "size", "offset", "live", "in place of"]]
    for b in plan["buffers"]:
        rows.append([b["name"], b["dtype"], "[" + ",".join(shapes.to_text(x) for x in b["dims"])
                     + "]", _at_hints(d, b["size"]), _at_hints(d, b["offset"]),
                     f"{b['live'][0]}..{b['live'][1]}", b["inplace_of"] or "-"])
    if len(rows) > 1:
        lines += _table(rows)
    if timeline:
        lines += [""] + _timeline(d, plan)
    return lines


def _timeline(d, plan):
    """One row per buffer, one column per kernel: '#' while the buffer is live."""
    n = len(d.kernels)
    width = max([len(b["name"]) for b in plan["buffers"]] + [6])
    lines = ["timeline (columns: kernels in schedule order)",
             " " * (width + 3) + "".join(str(i % 10) for i in range(n))]
    for b in plan["buffers"]:
        first, last = b["live"]
        bar = "".join("#" if first <= i <= last else "." for i in range(n))
        lines.append(f"  {b['name'].ljust(width)} {bar}  {_at_hints(d, b['size'])} B "
                     f"@ {_at_hints(d, b['offset'])}")
    return lines


def pass_lines(d):
    lines = ["pass counts:"]
    for name, counts in d.pass_counts.items():
        body = ", ".join(f"{k}={v}" for k, v in counts.items()) if isinstance(counts, dict) \
            else str(counts)
        lines.append(f"  {name}: {body}")
    return lines


def memory_view(d):
    if d.kind != "compiled":
        raise DumpError(f"{d.path} is a saved graph: it has no memory plan")
    return "\n".join([_title(d)] + memory_lines(d, timeline=True)) + "\n"


def code_view(d, key):
    if d.kind != "compiled":
        raise DumpError(f"{d.path} is a saved graph: it has no generated code")
    if key in ("all", "module"):
        return d.code
    k = d.kernel(key)
    if not k.get("code"):
        raise DumpError(f"kernel {key!r} has no code in the file")
    return k["code"]


def after_pass_view(d, name):
    if d.kind != "compiled":
        raise DumpError(f"{d.path} is a saved graph: it records no passes")
    if name not in d.pass_texts:
        raise DumpError(f"no dump after pass {name!r}; recorded: "
                        f"{', '.join(d.pass_texts) or 'none'}")
    return d.pass_texts[name]
