"""A test-only driver of GPU executable specs: runs the launches through the emulation
functions (`<kernel>.emulate`), with numpy arrays for the arena, feeds, fetches,
variables and constants. The runtime's own launcher is runtime/gpu.py; this one exists
so that backends/gpu is tested against its contract by itself."""
import ctypes

import numpy as np

from runtime.jit import CompiledModule
from runtime.shapes import evaluate, evaluate_dims


class KernelFailed(RuntimeError):
    def __init__(self, site, details):
        super().__init__(f"{site['class']}: {site['message']} ({site['op']}) {details}")
        self.site = site


class EmulatedGpu:
    def __init__(self, spec):
        self.spec = spec
        # O1, as the runtime's EmulatedDevice: these only check kernels (a third of the time)
        self.code = CompiledModule(spec["emulation_ir"], speed_level=1)
        self._fns = {}

    def _function(self, name, n_args):
        fn = self._fns.get(name)
        if fn is None:
            proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (n_args + 2)),
                                     ctypes.c_int64, ctypes.c_int64)
            fn = self._fns[name] = proto(self.code.address(name + ".emulate"))
        return fn

    def run(self, feeds, variables=None, grid=None, block=None):
        """Fetch arrays of one run; `variables` {name: array} is updated in place.
        grid/block override every launch's configuration (block: only where it is at
        most the launch's own: templates size their shared arrays by theirs)."""
        spec = self.spec
        variables = {} if variables is None else variables
        feeds = [np.ascontiguousarray(f, dtype=d["dtype"]) for f, d in zip(feeds, spec["feeds"])]
        env = {s["name"]: feeds[s["feed"]].shape[s["axis"]] for s in spec["symbols"]}
        syms = np.zeros(len(spec["symbols"]) + spec["error_detail_slots"], np.int64)
        syms[:len(spec["symbols"])] = [env[s["name"]] for s in spec["symbols"]]
        status = np.zeros(1, np.int32)
        arena = np.zeros(evaluate(spec["arena_bytes"], env) + 64, np.uint8)
        consts = [np.frombuffer(c["data"], c["dtype"]).reshape(c["shape"]).copy()
                  for c in spec["constants"]]
        fetches = [np.zeros(evaluate_dims(f["dims"], env), f["dtype"]) for f in spec["fetches"]]
        var_arrays = []
        for v in spec["variables"]:
            if v["name"] not in variables:
                variables[v["name"]] = np.zeros(evaluate_dims(v["dims"], env), v["dtype"])
            var_arrays.append(variables[v["name"]])
        tables = {"feed": feeds, "fetch": fetches, "var": var_arrays, "const": consts}

        def pointer(key):
            kind, what = key
            if kind == "arena":
                return arena.ctypes.data + evaluate(what, env)
            return tables[kind][what].ctypes.data

        for launch in spec["launches"]:
            fn = self._function(launch["kernel"], len(launch["args"]))
            g = evaluate(launch["grid"], env) if grid is None else grid
            blk = launch["block"]
            if block is not None and block <= blk and not launch["kernel"].endswith("_gemm"):
                blk = block  # (a tiled product's threads map onto its tile: never fewer)
            fn(*[pointer(k) for k in launch["args"]], syms.ctypes.data, status.ctypes.data,
               g, blk)
        if status[0]:
            raise KernelFailed(spec["error_sites"][status[0] - 1],
                               syms[len(spec["symbols"]):].tolist())
        return [self._fetched(f, fetches[j], feeds, var_arrays, consts)
                for j, f in enumerate(spec["fetches"])]

    @staticmethod
    def _fetched(f, array, feeds, var_arrays, consts):
        source = {"kernel": None, "feed": feeds, "variable": var_arrays, "const": consts,
                  "constant": consts}[f["source"]]
        return array if source is None else np.array(source[f["index"]])
