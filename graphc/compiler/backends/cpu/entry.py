"""The whole executable: kernel functions, the entry `graphc_main`, and the spec.

Where each Value lives (its *storage*, a plain tuple key):
  ("fetch", j)     module output j: written straight into the fetch array
  ("arena", key)   a planned intermediate: arena + its offset (a SymDim evaluated in the
                   entry from the symbol values)
  ("feed", i), ("var", name), ("const", k): feeds, variables (read and updated in place),
                   constants (the spec's "constants", read-only)
The entry loads each kernel's pointers (and computes arena offsets) and calls the kernels
in schedule order, returning the first nonzero status (1 + error site).
"""
import numpy as np
from llvmlite import ir

from graphc.compiler.loops.expr import dim_key
from graphc.compiler.ir import PARAMETER, STATE_VARIABLE
from graphc.framework.op_def import READING_UPDATE_OPS, UPDATE_OPS
from graphc.framework.symbolic import SymDim
from kernels.loops import I32, I64, PTR
from runtime import jit

ENTRY = "graphc_main"
PROFILE_GLOBAL = "graphc_profile_cycles"  # i64 per kernel call: cycles spent in it, summed
MAX_ERROR_DETAILS = 4  # run-time values an error message may show (syms slots)


def dim_json(d):
    return d.to_json() if isinstance(d, SymDim) else int(d)


class Program:
    """Shared state of one executable being generated: the LLVM module, storages,
    constants, error sites, symbols."""

    def __init__(self, module):
        self.module = module
        self.llvm = ir.Module(name=module.name)
        self.symbols = list(module.symbols)
        self._symbol_index = {s: i for i, s in enumerate(self.symbols)}
        self.variables = list(module.variables)
        self._var_index = {n: i for i, n in enumerate(self.variables)}
        self.error_sites = []
        # a failing check writes its values (bad index, bound, position) to syms slots
        # error_detail_base.. for the runtime to put in the message
        self.error_detail_base = len(self.symbols)
        self.constants = []
        self._const_index = {}
        self._fetches = {}
        for j, v in enumerate(module.outputs):
            self._fetches.setdefault(v, []).append(j)
        plan = getattr(module, "memory_plan", None)
        self.buffers = plan.buffers if plan is not None else {}
        self.aliases = getattr(module, "aliases", None) or {}
        self.arena_bytes = plan.arena_bytes if plan is not None else 0
        self._arena_offsets = {}

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

    def _runtime_fetch(self, value):
        """Fetches of feeds, variables and constants are copied by the runtime."""
        return value.node.type in (PARAMETER, "VariableV2", "Const")

    def _arena(self, value):
        return ("arena", self._arena_key(value))

    def _arena_key(self, value):
        offset = self.buffers[value].offset
        key = dim_key(offset)
        self._arena_offsets[key] = offset
        return key

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

    # --------------------------------------------------------------- entry
    def emit_entry(self, calls, profile=False):
        """calls: [(function, [storage keys])] in schedule order. profile: count the
        cycles (the CPU's time-stamp counter) each call takes into PROFILE_GLOBAL, an i64
        per call summed over runs (runtime.Executable.kernel_profile reads it)."""
        fn = ir.Function(self.llvm, ir.FunctionType(I32, [PTR] * 6), ENTRY)
        counters = self._profile_counters(len(calls)) if profile else None
        feeds, fetches, variables, constants, arena, syms = fn.args
        tables = {"feed": feeds, "fetch": fetches, "var": variables, "const": constants}
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        pointers = {}

        def pointer(key):
            p = pointers.get(key)
            if p is None:
                kind, what = key
                if kind == "arena":
                    offset = self.emit_dim(b, self._arena_offsets[what], syms)
                    p = b.gep(arena, [offset], source_etype=ir.IntType(8))
                else:
                    slot = self._var_index[what] if kind == "var" else what
                    p = b.load(b.gep(tables[kind], [ir.Constant(I64, slot)], source_etype=PTR),
                               typ=PTR)
                pointers[key] = p
            return p

        restore_blas = self._pin_blas_threads(b)
        # every failing call branches to one exit (its status through a phi): a return
        # block per call, each restoring the BLAS threads, was most of the entry's IR
        fail = fn.append_basic_block("failed") if calls else None
        failures = []
        for k, (callee, keys) in enumerate(calls):
            args = [pointer(key) for key in keys] + [syms]
            if counters is None:
                status = b.call(callee, args)
            else:
                status = self._profiled_call(b, counters, k, callee, args)
            ok = b.append_basic_block("ok")
            b.cbranch(b.icmp_signed("!=", status, ir.Constant(I32, 0)), fail, ok)
            failures.append((status, b.block))
            b.position_at_end(ok)
        restore_blas()
        b.ret(ir.Constant(I32, 0))
        if fail is not None:
            b.position_at_end(fail)
            status = b.phi(I32)
            for value, block in failures:
                status.add_incoming(value, block)
            restore_blas()
            b.ret(status)
        return fn

    def _pin_blas_threads(self, b):
        """When the kernels call BLAS: the library runs single-threaded during the run
        (its calls are split across our own team: gemm_team.py, conv_team.py). The first
        of overlapping runs (a process-wide count, runtime.jit.BLAS_PIN_GLOBAL) saves the
        library's thread count and sets 1; the last one restores it. Returns what emits
        the restoring, before each return of the entry."""
        blas = jit.blas_names().values() if jit.blas_library() else ()
        names = jit.blas_thread_symbols() if any(n in self.llvm.globals for n in blas) \
            else None
        if names is None:
            return lambda: None
        set_fn = ir.Function(self.llvm, ir.FunctionType(ir.VoidType(), [I32]), names[0])
        get_fn = ir.Function(self.llvm, ir.FunctionType(I32, []), names[1])
        pin = ir.GlobalVariable(self.llvm, ir.ArrayType(I64, 2), jit.BLAS_PIN_GLOBAL)
        pin.linkage = "external"
        runs = b.gep(pin, [ir.Constant(I64, 0), ir.Constant(I64, 0)])
        saved = b.gep(pin, [ir.Constant(I64, 0), ir.Constant(I64, 1)])
        first = b.atomic_rmw("add", runs, ir.Constant(I64, 1), "seq_cst")
        with b.if_then(b.icmp_signed("==", first, ir.Constant(I64, 0))):
            b.store(b.sext(b.call(get_fn, []), I64), saved)
            b.call(set_fn, [ir.Constant(I32, 1)])

        def restore():
            last = b.atomic_rmw("sub", runs, ir.Constant(I64, 1), "seq_cst")
            with b.if_then(b.icmp_signed("==", last, ir.Constant(I64, 1))):
                b.call(set_fn, [b.trunc(b.load(saved, typ=I64), I32)])
        return restore

    def _profile_counters(self, n):
        counters = ir.GlobalVariable(self.llvm, ir.ArrayType(I64, n), PROFILE_GLOBAL)
        counters.initializer = ir.Constant(ir.ArrayType(I64, n), [0] * n)
        return counters

    def _profiled_call(self, b, counters, k, callee, args):
        clock = self.llvm.globals.get("llvm.readcyclecounter") or ir.Function(
            self.llvm, ir.FunctionType(I64, []), "llvm.readcyclecounter")
        start = b.call(clock, [])
        status = b.call(callee, args)
        spent = b.sub(b.call(clock, []), start)
        slot = b.gep(counters, [ir.Constant(I64, 0), ir.Constant(I64, k)])
        b.store(b.add(b.load(slot, typ=I64), spent), slot)
        return status

    # ---------------------------------------------------------------- spec
    def spec(self, llvm_ir, target):
        m = self.module
        params = sorted(m.params, key=lambda p: p.attrs["index"])
        return {
            "format_version": 1,
            "entry": ENTRY,
            "llvm_ir": llvm_ir,
            "target": target,
            "symbols": [{"name": s, "feed": m.symbols[s][0], "axis": m.symbols[s][1]}
                        for s in self.symbols],
            "guards": [list(g) for g in m.guards],
            "value_guards": [dict(g) for g in getattr(m, "value_guards", ())],
            "feeds": [self._tensor_spec(p.name, p.outputs[0]) for p in params],
            "fetches": [dict(self._tensor_spec(v.name, v), **self._fetch_source(v))
                        for v in m.outputs],
            "variables": self._variable_specs(),
            "constants": self.constants,
            "arena_bytes": dim_json(self.arena_bytes),
            "error_sites": self.error_sites,
            "error_detail_slots": MAX_ERROR_DETAILS,
        }

    @staticmethod
    def _tensor_spec(name, value):
        return {"name": name, "dtype": value.dtype.name,
                "dims": [dim_json(d) for d in value.dims]}

    def _fetch_source(self, value):
        node = value.node
        if node.type == PARAMETER:
            return {"source": "feed", "index": node.attrs["index"]}
        if node.type == "VariableV2":
            return {"source": "variable", "index": self._var_index[node.name]}
        if node.type == "Const":
            return {"source": "constant", "index": self.constant_index(node)}
        return {"source": "kernel", "index": self._fetches[value][0]}

    def _variable_specs(self):
        # which variables the module writes and reads, from one pass over its nodes (a
        # pass per variable was quadratic in a deep model's graph)
        written, read = set(), set()
        for n in self.module.nodes:
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
