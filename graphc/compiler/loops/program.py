"""One executable being generated, as every backend sees it: where each value lives, the
constants, error sites and symbols, dims as i64 arithmetic, and the spec fields common to
the targets (docs/compiler.md section 6; a backend adds its code: the CPU's entry and LLVM
IR in backends/cpu/entry.py, the GPU's PTX and launches in backends/gpu/spec.py).

Where each Value lives (its *storage*, a plain tuple key):
  ("fetch", j)     module output j: written straight into the fetch array
  ("arena", key)   a planned intermediate: arena + its offset (a SymDim evaluated in the
                   entry from the symbol values)
  ("feed", i), ("var", name), ("const", k): feeds, variables (read and updated in place),
                   constants (the spec's "constants", read-only)
"""
import numpy as np
from llvmlite import ir

from graphc.compiler.ir import PARAMETER, STATE_VARIABLE
from graphc.compiler.loops.expr import dim_key
from graphc.framework.op_def import READING_UPDATE_OPS, UPDATE_OPS
from graphc.framework.symbolic import SymDim
from kernels.loops import I64

MAX_ERROR_DETAILS = 8  # run-time values an error message may show (syms slots)


def dim_json(d):
    return d.to_json() if isinstance(d, SymDim) else int(d)


class Program:
    """Shared state of one executable being generated: the LLVM module the kernels are
    emitted into, storages, constants, error sites, symbols."""

    def __init__(self, module, enclosing=None):
        """enclosing: the Program of the module whose While or If has `module` as a body
        (graphc/compiler/regions.py): the body's code goes into the same LLVM module and
        shares its symbols, variables, constants and error sites; only its storages (its
        own feeds, fetches and arena) are its own."""
        self.module = module
        if enclosing is None:
            self.llvm = ir.Module(name=module.name)
            self.symbols = list(module.symbols)
            self.variables = list(module.variables)
            self.error_sites = []
            self.constants = []
            self._const_index = {}
        else:
            self.llvm = enclosing.llvm
            self.symbols = enclosing.symbols
            self.variables = enclosing.variables
            self.error_sites = enclosing.error_sites
            self.constants = enclosing.constants
            self._const_index = enclosing._const_index
        # a failing check writes its values (bad index, bound, position) to syms slots
        # error_detail_base.. for the runtime to put in the message
        self.error_detail_base = len(self.symbols)
        # dims set during the run (compiler/regions.py's trip counts), in the slots after
        # those: the runtime knows them only as slots to allocate
        self.run_dims = enclosing.run_dims if enclosing is not None else module.run_dims
        self._symbol_index = {s: i for i, s in enumerate(self.symbols)}
        self._symbol_index.update(
            (s, self.error_detail_base + MAX_ERROR_DETAILS + j)
            for j, s in enumerate(self.run_dims))
        self._var_index = {n: i for i, n in enumerate(self.variables)}
        self._fetches = {}
        for j, v in enumerate(module.outputs):
            self._fetches.setdefault(v, []).append(j)
        plan = getattr(module, "memory_plan", None)
        self.buffers = plan.buffers if plan is not None else {}
        # variable reads a kernel copies (fusion's snapshots: an update follows them): their
        # value is the copy, so a fetch of one is the kernel's, not the runtime's
        self.snapshot_reads = {v for k in getattr(module, "kernels", None) or ()
                               for v in k.outputs if v.node.type == "VariableV2"}
        self.aliases = getattr(module, "aliases", None) or {}
        # the kernel functions (a While's) handed the header of a value growing on the
        # heap, not its rows (backends/cpu/entry.py)
        self.header_readers = set()
        self.arena_bytes = plan.arena_bytes if plan is not None else 0
        self._arena_offsets = {}
        self._in_body = enclosing is not None
        self._read_by_kernels = None

    # ------------------------------------------------------------- storages
    def storage_of(self, value):
        """Where a value computed before a kernel runs is read from (an alias: where its
        input is)."""
        value = self.aliases.get(value, value)
        node = value.node
        if node.type == PARAMETER:
            return ("feed", node.attrs["index"])
        if node.type == "Const":
            return ("const", self.constant_index(node))
        if value in self._fetches and not self._runtime_fetch(value):
            return ("fetch", self._fetches[value][0])
        if value in self.buffers:
            return self._arena(value)
        if node.type == "VariableV2":
            return ("var", node.name)
        if node.type in UPDATE_OPS:
            return ("var", node.inputs[0].name)
        raise LookupError(f"no buffer for {value} ({node.describe()}): the memory plan has "
                          f"no entry for it")

    def stores_of(self, value):
        """Every buffer a kernel computing `value` writes it to."""
        if self._runtime_fetch(value):
            return [("arena", self._arena_key(value))] if value in self.buffers else []
        out = [("fetch", j) for j in self._fetches.get(value, [])]
        if value in self.buffers:
            out.append(self._arena(value))
        return out

    def unread_stores(self, value):
        """The stores of `value` (a kernel output) that no kernel of the run reads: fetch
        arrays that only the caller reads, after the run. None in a While's or If's body,
        whose outputs the next iteration reads. A store no kernel reads soon need not keep
        its lines in the caches (backends/cpu/loop_kernel.py streams the large ones)."""
        if self._in_body or self._runtime_fetch(value) or value in self._values_read():
            return []
        return [("fetch", j) for j in self._fetches.get(value, [])]

    def _values_read(self):
        """Every value some kernel reads from a buffer (computed outside it), and the
        values whose buffer those alias."""
        if self._read_by_kernels is None:
            read = set()
            for kernel in getattr(self.module, "kernels", None) or ():
                computed = {v for n in kernel.nodes for v in n.outputs}
                for node in kernel.nodes:
                    read.update(v for v in node.inputs if v not in computed)
            read.update(self.aliases.get(v) for v in list(read))
            self._read_by_kernels = read
        return self._read_by_kernels

    def scratch_of(self, kernel):
        """The storage key ("arena", offset) of a kernel's scratch buffer (the memory
        plan's `scratch`: {kernel index: Buffer}), or None: the kernel then allocates its
        own. A question of the Program, as storage_of is, so that kernel_reuse.py can ask
        it again of a structurally equal kernel."""
        scratch = getattr(getattr(self.module, "memory_plan", None), "scratch", None)
        if not scratch:
            return None
        index = next((t for t, k in enumerate(self.module.kernels) if k is kernel), None)
        buffer = scratch.get(index)
        return None if buffer is None else ("arena", self.arena_key(buffer.offset))

    def _runtime_fetch(self, value):
        """Fetches of feeds, variables and constants are copied by the runtime (after the
        run: a variable's value then, so a snapshot read is the kernel's)."""
        if value.node.type == "VariableV2":
            return value not in self.snapshot_reads
        return value.node.type in (PARAMETER, "Const")

    def _arena(self, value):
        return ("arena", self._arena_key(value))

    def _arena_key(self, value):
        return self.arena_key(self.buffers[value].offset)

    def arena_key(self, offset):
        """The storage key of the arena at `offset` (a dim), remembered so that the code
        can compute the pointer (arena_offset)."""
        key = dim_key(offset)
        self._arena_offsets[key] = offset
        return key

    def arena_offset(self, key):
        return self._arena_offsets[key]

    def variable_index(self, name):
        """The variable's index into the spec's "variables" (and the run's table)."""
        return self._var_index[name]

    def constant_index(self, node):
        k = self._const_index.get(node)
        if k is None:
            # np.array, not np.ascontiguousarray: that one makes a 0-d value 1-d
            arr = np.array(node.attrs["value"], order="C")
            k = self._const_index[node] = len(self.constants)
            self.constants.append({"dtype": arr.dtype.name, "shape": list(arr.shape),
                                   "data": arr.tobytes()})
        return k

    def error_site(self, node, message, class_name="InvalidArgumentError", args=None):
        """A new error site; `args`: the kinds of the run-time values its message template
        formats ({0}, {1}...: "int", or {"index": dims} for a linear position)."""
        site = {"class": class_name, "message": message, "op": f"node {node.describe()}"}
        if args:
            site["args"] = [a if isinstance(a, str) else
                            {"index": [dim_json(d) for d in a["index"]]} for a in args]
        self.error_sites.append(site)
        return len(self.error_sites) - 1

    # ---------------------------------------------------------------- dims
    def symbol_index(self, symbol):
        """The syms slot of a symbol, or of a dim set during the run."""
        return self._symbol_index[symbol]

    def emit_dim(self, builder, d, syms):
        """A dim (int or SymDim) as an i64 computed from the syms array."""
        return self._emit_json(builder, dim_json(d), syms)

    def _emit_json(self, builder, expr, syms):
        if isinstance(expr, int):
            return ir.Constant(I64, expr)
        total = None
        for coeff, mono in expr:
            term = ir.Constant(I64, coeff)
            for atom, power in mono:
                value = self._emit_atom(builder, atom, syms)
                for _ in range(power):
                    term = builder.mul(term, value)
            total = term if total is None else builder.add(total, term)
        return ir.Constant(I64, 0) if total is None else total

    def _emit_atom(self, builder, atom, syms):
        if isinstance(atom, str):
            ptr = builder.gep(syms, [ir.Constant(I64, self._symbol_index[atom])],
                              source_etype=I64)
            return builder.load(ptr, typ=I64)
        op, a, b = atom
        a, b = self._emit_json(builder, a, syms), self._emit_json(builder, b, syms)
        if op == "max":
            return builder.select(builder.icmp_signed(">", a, b), a, b)
        return _floor_div_mod(builder, a, b)[0 if op == "floordiv" else 1]

    # ---------------------------------------------------------------- spec
    def spec(self, target, code):
        """The executable spec: the fields every target has, with the target's `code`
        fields (a dict) after the format version."""
        m = self.module
        params = sorted(m.params, key=lambda p: p.attrs["index"])
        return {
            "format_version": 1,
            **code,
            "target": target,
            "symbols": [{"name": s, "feed": m.symbols[s][0], "axis": m.symbols[s][1]}
                        for s in self.symbols],
            "guards": [list(g) for g in m.guards],
            "value_guards": [dict(g) for g in getattr(m, "value_guards", ())],
            "feeds": [self._tensor_spec(p.name, p.outputs[0]) for p in params],
            "fetches": [dict(self._tensor_spec(v.name, v), **self.fetch_source(v))
                        for v in m.outputs],
            "variables": self._variable_specs(),
            "constants": self.constants,
            "arena_bytes": dim_json(self.arena_bytes),
            "error_sites": self.error_sites,
            "error_detail_slots": MAX_ERROR_DETAILS,
            "run_dims": len(self.run_dims),
        }

    @staticmethod
    def _tensor_spec(name, value):
        return {"name": name, "dtype": value.dtype.name,
                "dims": [dim_json(d) for d in value.dims]}

    def fetch_source(self, value):
        """Where the runtime finds fetched `value`: {"source": "feed" | "variable" |
        "constant" | "kernel", "index": k} (a kernel output: the first fetch slot holding
        it; others are copies)."""
        node = value.node
        if node.type == PARAMETER:
            return {"source": "feed", "index": node.attrs["index"]}
        if node.type == "VariableV2" and self._runtime_fetch(value):
            return {"source": "variable", "index": self._var_index[node.name]}
        if node.type == "Const":
            return {"source": "constant", "index": self.constant_index(node)}
        return {"source": "kernel", "index": self._fetches[value][0]}

    def _variable_specs(self):
        # which variables the module writes and reads, from one pass over its nodes (a
        # pass per variable was quadratic in a deep model's graph)
        written, read = set(), set()
        for n in self.module.all_nodes():
            if n.type in UPDATE_OPS:
                written.add(n.inputs[0].name)
            if n.type == "VariableV2":
                read.add(n.name)
            elif n.type in READING_UPDATE_OPS:
                read.add(n.inputs[0].name)
            if STATE_VARIABLE in n.attrs:  # a missing state is an error, never a fresh array
                read.add(n.attrs[STATE_VARIABLE])
                written.add(n.attrs[STATE_VARIABLE])
        return [self._variable_spec(name, name in written, name in read)
                for name in self.variables]

    def _variable_spec(self, name, written, read):
        ref = self.module.variables[name]
        return {"name": name, "dtype": ref.dtype.name, "dims": [dim_json(d) for d in ref.dims],
                "written": written, "read": read,
                # its graph shape is unknown: the code is specialized on the shape it held
                "shape_guard": name in getattr(self.module, "shape_guarded_variables", ())}


def _floor_div_mod(builder, a, b):
    """Python's // and % of two i64s, as SymDim means them: dims are written with floor
    division of negative terms (ceil(h / s) is -floordiv(-h, s)), which LLVM's truncating
    sdiv/srem get wrong by one."""
    q, r = builder.sdiv(a, b), builder.srem(a, b)
    zero = ir.Constant(I64, 0)
    signs_differ = builder.icmp_signed("!=", builder.icmp_signed("<", r, zero),
                                       builder.icmp_signed("<", b, zero))
    adjust = builder.and_(builder.icmp_signed("!=", r, zero), signs_differ)
    return (builder.select(adjust, builder.sub(q, ir.Constant(I64, 1)), q),
            builder.select(adjust, builder.add(r, b), r))
