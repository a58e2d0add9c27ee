"""Random-graph differential tester: the reference, compiled CPU and emulated GPU backends
must agree on every random graph.

A program is plain data: a list of Python statements (`v3 = tf.exp(v1)`), the feeds of its
placeholders and the names it fetches. The same statements build the graph (exec) and are
printed as the runnable TF1 script of a failing case, so what is printed is what ran.

Generation builds each candidate op in a scratch graph whose placeholders have their full
run-time shapes: graphc's own shape inference says whether the op is valid and what it
yields, and a candidate it rejects is dropped. The program that runs declares some of
those dims unknown (None), fed at run time.

A graph that mismatches (values beyond the dtype's tolerance, different shapes/dtypes, or
one backend raising where another does not) is shrunk: fetches are narrowed to one, then
each computed value is replaced by a placeholder fed its reference value (cutting the
graph above it) or removed when unused, until no single step keeps it failing.

CLI:  python tools/difftest.py --seed S --count N [--backends reference,compiled,gpu_emulated]
"""
import argparse
import os
import re
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import graphc as tf  # noqa: E402

BACKENDS = ("reference", "compiled", "gpu_emulated")
FLOATS = ("float32", "float64")
INTS = ("int32", "int64")
# Relative tolerance per dtype, scaled by the magnitude of the fetched value: random graphs
# compose transcendentals, so a few ulp per op grow along a chain.
RTOL = {"float32": 2e-4, "float64": 1e-9, "float16": 1e-2}


# ---------------------------------------------------------------------------------------
# Programs

class Program:
    def __init__(self, lines, feeds, fetches, placeholders):
        self.lines = list(lines)        # statements, each defining one name v<k> (or a list)
        self.feeds = dict(feeds)        # placeholder name -> np.ndarray
        self.fetches = list(fetches)    # names fetched in the first run
        self.placeholders = dict(placeholders)  # name -> declared shape (None dims allowed)
        self.assigned = []              # variables assigned: their values are fetched again
        self.precision = {}             # name -> the least precise float dtype it depends on

    def copy(self):
        p = Program(self.lines, self.feeds, self.fetches, self.placeholders)
        p.assigned = list(self.assigned)
        p.precision = dict(self.precision)
        return p

    def script(self):
        """A runnable TF1 script (graphc as tf) that builds and runs this program."""
        out = ["import numpy as np", "import graphc as tf", ""]
        for name, value in self.feeds.items():
            out.append(f"{name}_value = {_literal(value)}")
        out += self.body_lines()
        out.append(f"fetches = [{', '.join(self.fetches)}]")
        out.append(f"feeds = {{{', '.join(f'{n}: {n}_value' for n in self.feeds)}}}")
        out.append("for backend in ['reference', 'compiled', 'gpu_emulated']:")
        out.append("    with tf.Session(config=tf.ConfigProto(backend=backend)) as sess:")
        out.append("        sess.run(tf.global_variables_initializer())")
        out.append("        print(backend, sess.run(fetches, feeds))")
        if self.assigned:
            out.append(f"        print(backend, sess.run([{', '.join(self.assigned)}]))")
        return "\n".join(out) + "\n"

    def body_lines(self):
        decl = [f"{n} = tf.placeholder(tf.{self.feeds[n].dtype.name}, {_shape_arg(s)})"
                for n, s in self.placeholders.items()]
        return decl + self.lines

    def build(self):
        """Builds the graph in a fresh default graph; returns the namespace."""
        tf.reset_default_graph()
        ns = {"tf": tf, "np": np}
        for n, s in self.placeholders.items():
            ns[n] = tf.placeholder(tf.as_dtype(self.feeds[n].dtype.name), _shape_arg(s, True),
                                   name=n)
        exec("\n".join(self.lines), ns)
        return ns


def _shape_arg(shape, as_value=False):
    if shape is None:
        return None if as_value else "None"
    return list(shape) if as_value else repr(list(shape))


def _literal(a):
    dt = a.dtype.name
    if a.dtype == np.bool_:
        return f"np.array({a.tolist()!r}, dtype=np.bool_).reshape({a.shape!r})"
    if a.dtype.kind == "f":   # shortest text that reads back to the same dtype's value
        text = "[" + ", ".join(str(v) for v in a.ravel()) + "]"
    else:
        text = repr(a.ravel().tolist())
    text = text.replace("inf", "np.inf").replace("nan", "np.nan")
    return f"np.array({text}, dtype=np.{dt}).reshape({a.shape!r})"


# ---------------------------------------------------------------------------------------
# Running and comparing

def run_program(prog, backend):
    """Returns a list of arrays (first-run fetches then assigned variables), or the
    exception raised building or running the graph."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ns = prog.build()
            feeds = {ns[n]: v for n, v in prog.feeds.items()}
            with tf.Session(config=tf.ConfigProto(backend=backend)) as sess:
                if tf.global_variables():   # each run signature is a compile: skip empty ones
                    sess.run(tf.global_variables_initializer())
                out = sess.run([ns[f] for f in prog.fetches], feeds)
                if prog.assigned:
                    out += sess.run([ns[v] for v in prog.assigned])
        return [np.asarray(o) for o in out]
    except Exception as e:  # a backend's error is a result to compare, not a crash
        return e


def compare(ref, other, names, precisions=None):
    """None when they agree, else a sentence saying where they differ."""
    if isinstance(ref, Exception) or isinstance(other, Exception):
        if isinstance(ref, Exception) and isinstance(other, Exception):
            return None
        bad = ref if isinstance(ref, Exception) else other
        who = "reference" if bad is ref else "the other backend"
        return f"only {who} raised {type(bad).__name__}: {str(bad)[:300]}"
    precisions = precisions or [None] * len(names)
    for name, a, b, low in zip(names, ref, other, precisions):
        why = compare_arrays(a, b, low)
        if why:
            return f"{name}: {why}"
    return None


def compare_arrays(a, b, low=None):
    """`low`: the least precise float dtype the value was computed through (a float32
    tanh cast to float64 carries float32 rounding)."""
    if a.shape != b.shape:
        return f"shape {a.shape} vs {b.shape}"
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} vs {b.dtype}"
    if a.dtype.kind != "f":
        if not np.array_equal(a, b):
            return f"values differ at {np.argwhere(a != b)[:3].tolist()}: {a.ravel()[:6]} vs {b.ravel()[:6]}"
        return None
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if not np.array_equal(nan_a, nan_b):
        return f"NaN positions differ: {a.ravel()[:6]} vs {b.ravel()[:6]}"
    fa, fb = np.where(nan_a, 0, a), np.where(nan_b, 0, b)
    inf_a, inf_b = np.isinf(fa), np.isinf(fb)
    if not np.array_equal(np.where(inf_a, fa, 0), np.where(inf_b, fb, 0)):
        return f"inf positions differ: {a.ravel()[:6]} vs {b.ravel()[:6]}"
    fa, fb = np.where(inf_a, 0, fa).astype(np.float64), np.where(inf_b, 0, fb).astype(np.float64)
    if fa.size == 0:
        return None
    rtol = max(RTOL.get(a.dtype.name, 1e-4), RTOL.get(low, 0))
    scale = max(1.0, float(np.max(np.abs(fa))))
    err = np.abs(fa - fb)
    bad = err > rtol * (np.abs(fa) + scale * 1e-2) + rtol * 1e-3
    if bad.any():
        i = np.argwhere(bad)[0].tolist()
        return f"value at {i}: {fa[tuple(i)]!r} vs {fb[tuple(i)]!r}"
    return None


def check(prog, backends):
    """None when all backends agree, else (backend, reason)."""
    results = {b: run_program(prog, b) for b in backends}
    names = prog.fetches + [f"{v} (after the run)" for v in prog.assigned]
    lows = [prog.precision.get(n) for n in prog.fetches + prog.assigned]
    base = results[backends[0]]
    for b in backends[1:]:
        why = compare(base, results[b], names, lows)
        if why:
            return b, why
    return None


# ---------------------------------------------------------------------------------------
# Generation

class Gen:
    """Grows one random program. Candidates are built in a scratch graph with fully known
    shapes; graphc's shape inference accepts or rejects them."""

    def __init__(self, rng, max_ops):
        self.rng = rng
        self.max_ops = max_ops
        tf.reset_default_graph()
        self.ns = {"tf": tf, "np": np}
        self.lines, self.feeds, self.placeholders = [], {}, {}
        self.values = []          # (name, dtype name, concrete shape, exact)
        self.variables = []       # names of variables (never read when assigned)
        self.assigned = []
        self.extra_fetch = []     # assigns nothing else runs: fetched themselves
        self.k = 0

    def fresh(self):
        self.k += 1
        return f"v{self.k}"

    # -- sources ---------------------------------------------------------------------
    def random_shape(self, rank=None):
        rank = self.rng.integers(0, 4) if rank is None else rank
        sizes = [1, 2, 3, 5, 2, 3, 4, 0] if self.rng.random() < 0.08 else [1, 2, 3, 5, 2, 3, 4]
        return tuple(int(self.rng.choice(sizes)) for _ in range(rank))

    def random_array(self, dtype, shape):
        r = self.rng
        if dtype in FLOATS:
            a = r.uniform(-2, 2, size=shape)
            if r.random() < 0.3:      # exact small values: ties, zeros and integral points
                a = r.integers(-3, 4, size=shape).astype(np.float64) / 2
            return a.astype(dtype)
        if dtype in INTS:
            return r.integers(-4, 6, size=shape).astype(dtype)
        return r.random(size=shape) < 0.5

    def add_placeholder(self, dtype, shape):
        name = self.fresh()
        value = self.random_array(dtype, shape)
        declared = [None if (d > 0 and self.rng.random() < 0.4) else d for d in shape]
        if self.rng.random() < 0.05:
            declared = None     # unknown rank
        self.feeds[name] = value
        self.placeholders[name] = declared if declared is not None else None
        self.ns[name] = tf.placeholder(tf.as_dtype(dtype), list(shape), name=name)
        self.values.append((name, dtype, tuple(shape), True))
        return name

    def add_constant(self, dtype, shape):
        return self.emit(f"tf.constant({_literal(self.random_array(dtype, shape))})", exact=True)

    def add_variable(self, dtype, shape):
        name = self.emit(f"tf.Variable({_literal(self.random_array(dtype, shape))})",
                         exact=True)
        if name:
            self.variables.append(name)
        return name

    # -- growing -----------------------------------------------------------------------
    def emit(self, expr, exact=False, control=None):
        """Builds `v = expr` in the scratch graph; on success records the line."""
        name = self.fresh()
        stmt = f"{name} = {expr}"
        if control:
            stmt = f"with tf.control_dependencies([{control}]):\n    {stmt}"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(stmt, self.ns)
        except Exception:
            self.ns.pop(name, None)
            return None
        self.lines.append(stmt)
        t = self.ns[name]
        if isinstance(t, tf.Tensor) and t.shape.is_fully_defined() \
                and t.dtype.name in FLOATS + INTS + ("bool",):
            self.values.append((name, t.dtype.name, tuple(t.shape.as_list()), exact))
        return name

    def pick(self, pred=lambda v: True):
        """A random known value satisfying pred (never an assigned variable: its read
        would race the assign)."""
        cands = [v for v in self.values if pred(v) and v[0] not in self.assigned]
        if not cands:
            return None
        return cands[int(self.rng.integers(len(cands)))]


def _float(v):
    return v[1] in FLOATS


def _num(v):
    return v[1] in FLOATS + INTS


def _exactf(v):
    return v[1] in FLOATS and v[3]


UNARY_SMOOTH = ["tf.tanh({x})", "tf.sigmoid({x})", "tf.sin({x})", "tf.cos({x})",
                "tf.square({x})", "tf.negative({x})", "tf.erf({x})", "tf.erfc({x})",
                "tf.nn.softplus({x})",
                "tf.nn.softsign({x})", "tf.nn.elu({x})", "tf.nn.selu({x})",
                "tf.nn.leaky_relu({x}, alpha=0.3)", "tf.exp(tf.tanh({x}) * 3)",
                "tf.expm1(tf.tanh({x}) * 2)", "tf.log(tf.abs({x}) + 0.5)",
                "tf.log1p(tf.abs({x}))", "tf.sqrt(tf.abs({x}) + 0.25)",
                "tf.rsqrt(tf.abs({x}) + 0.25)", "tf.reciprocal(tf.abs({x}) + 0.5)",
                "tf.pow(tf.abs({x}) + 0.5, 1.5)", "tf.nn.relu({x})", "tf.nn.relu6({x} * 4)",
                "tf.abs({x})", "tf.identity({x})", "tf.stop_gradient({x})",
                "tf.check_numerics({x}, 'bad')", "tf.clip_by_value({x}, -1.0, 1.0)",
                "tf.nn.softmax({x})", "tf.nn.log_softmax({x})", "tf.nn.l2_loss({x})",
                "tf.cumsum({x}, axis={ax})", "tf.cumsum({x}, axis={ax}, exclusive=True, reverse=True)",
                "tf.reduce_logsumexp({x}, axis={ax})", "tf.nn.l2_normalize({x} + 3.0, axis={ax})"]
# Discontinuous ops read only exact values (feeds, constants, index ops of them): a
# rounding difference upstream would otherwise flip them legitimately.
UNARY_EXACT = ["tf.floor({x})", "tf.ceil({x})", "tf.round({x})", "tf.sign({x})",
               "tf.cast({x}, tf.int32)", "tf.argmax({x}, axis={ax})",
               "tf.argmin({x}, axis={ax})", "tf.reduce_max({x}, axis={ax})",
               "tf.reduce_min({x}, axis={ax}, keepdims=True)",
               "tf.cast(tf.greater({x}, 0.25), tf.float32)", "tf.count_nonzero({x}, axis={ax})",
               "tf.where(tf.less_equal({x}, 0.5), {x}, -{x})",
               "tf.reduce_sum(tf.unique(tf.reshape({x}, [-1]))[0])",
               # x / 0: +-inf, or nan at 0; x * 1e300 overflows float32 where x != 0
               "tf.cast(tf.is_nan({x} / ({x} - {x})), tf.int32)",
               "tf.cast(tf.is_inf({x} / ({x} - {x})), tf.int32)",
               "tf.cast(tf.logical_and(tf.is_finite({x}), tf.is_finite({x} * 1e300)), "
               "tf.int32)"]
UNARY_ANY = ["tf.reduce_sum({x}, axis={ax})", "tf.reduce_mean({x}, axis={ax}, keepdims=True)",
             "tf.reduce_prod(tf.clip_by_value({x}, -1.5, 1.5), axis={ax})",
             "tf.reduce_sum({x})", "tf.transpose({x})", "tf.expand_dims({x}, {ax})",
             "tf.squeeze({x})", "tf.reshape({x}, [-1])", "tf.tile({x}, {reps})",
             "tf.pad({x}, {pads})", "tf.pad({x}, {pads1}, mode='REFLECT')",
             "tf.pad({x}, {pads1}, mode='SYMMETRIC')", "tf.zeros_like({x})",
             "tf.ones_like({x})", "tf.shape({x})", "tf.size({x})", "tf.rank({x})",
             "{x}[::-1]", "{x}[1:]", "{x}[..., :2]",
             "tf.slice({x}, {begin}, {size})", "tf.gather({x}, {idx}, axis={ax})",
             "tf.stack([{x}, {x}], axis={ax})", "tf.unstack({x}, axis={ax})[0]",
             "tf.split({x}, 1, axis={ax})[0]", "tf.concat([{x}, {x}], axis={ax})",
             "tf.broadcast_to({x}, [2] + {shape})", "tf.cast({x}, tf.float64)",
             "tf.cast({x}, tf.float32)", "tf.reshape({x}, {rshape})"]
BINARY = ["tf.add({x}, {y})", "tf.subtract({x}, {y})", "tf.multiply({x}, {y})",
          "tf.maximum({x}, {y})", "tf.minimum({x}, {y})", "tf.squared_difference({x}, {y})",
          "{x} + {y}", "{x} * {y} - {y}", "tf.add_n([{x}, {x}, {x}])"]
BINARY_FLOAT = ["tf.truediv({x}, tf.abs({y}) + 0.5)", "tf.pow(tf.abs({x}) + 0.5, tf.tanh({y}))"]
BINARY_EXACT = ["tf.floordiv({x}, tf.abs({y}) + 1)", "tf.floormod({x}, tf.abs({y}) + 1)",
                "tf.where(tf.greater({x}, {y}), {x}, {y})",
                "tf.cast(tf.logical_and(tf.less({x}, {y}), tf.not_equal({x}, 0)), {xdt})",
                "tf.cast(tf.logical_or(tf.greater_equal({x}, {y}), tf.equal({y}, 1)), {xdt})"]


def grow_one(g):
    r = g.rng
    roll = r.random()
    if roll < 0.45:
        return grow_unary(g)
    if roll < 0.72:
        return grow_binary(g)
    if roll < 0.80:
        return grow_matmul(g)
    if roll < 0.84:
        return grow_nn(g)
    if roll < 0.90:
        return grow_gradient(g)
    if roll < 0.95:
        return grow_misc(g)
    return grow_state(g)


def _axis(g, shape):
    return int(g.rng.integers(-len(shape), len(shape))) if shape else 0


def _fill(g, tmpl, v):
    name, dt, shape, exact = v
    r = g.rng
    rank = len(shape)
    begin = [int(r.integers(0, d)) if d > 0 else 0 for d in shape]
    size = [int(r.integers(-1, d - b + 1)) if d > 0 else 0 for d, b in zip(shape, begin)]
    n = int(np.prod(shape)) if shape else 1
    divisors = [k for k in (1, 2, 3, 5) if n % k == 0] or [1]
    k = int(r.choice(divisors))
    ax = _axis(g, shape)
    axlen = shape[ax] if shape else 1
    idx = (f"[{', '.join(str(int(i)) for i in r.integers(0, axlen, size=3))}]" if axlen
           else "[]")
    return tmpl.format(
        x=name, ax=ax, reps=[int(r.integers(1, 3)) for _ in shape],
        pads=[[int(r.integers(0, 2)), int(r.integers(0, 3))] for _ in shape],
        pads1=[[int(r.integers(0, min(2, max(d - 1, 0) + 1))), 0] for d in shape],
        begin=begin, size=size, idx=idx, shape=list(shape),
        rshape=[k, -1] if rank else [1], xdt=f"tf.{dt}")


def grow_unary(g):
    r = g.rng
    roll = r.random()
    if roll < 0.45:
        v = g.pick(_float)
        tmpl = UNARY_SMOOTH[int(r.integers(len(UNARY_SMOOTH)))]
        exact = False
    elif roll < 0.6:
        v = g.pick(_exactf)
        tmpl = UNARY_EXACT[int(r.integers(len(UNARY_EXACT)))]
        exact = True
    else:
        v = g.pick()
        tmpl = UNARY_ANY[int(r.integers(len(UNARY_ANY)))]
        exact = None
    if v is None:
        return None
    if exact is None:
        exact = v[3] and "reduce_sum" not in tmpl and "reduce_mean" not in tmpl \
            and "reduce_prod" not in tmpl
    if v[1] == "bool" and "tf.cast" not in tmpl:
        return None
    return g.emit(_fill(g, tmpl, v), exact=exact)


def grow_binary(g):
    r = g.rng
    x = g.pick(_num)
    if x is None:
        return None
    # a partner of the same dtype whose shape broadcasts with x (or a fresh source)
    same = [v for v in g.values if v[1] == x[1] and v[0] not in g.assigned]
    y = same[int(r.integers(len(same)))] if same and r.random() < 0.6 else None
    if y is None:
        shape = list(x[2])
        shape = [1 if r.random() < 0.3 else d for d in shape][int(r.integers(0, len(shape) + 1)):]
        yname = (g.add_placeholder if r.random() < 0.6 else g.add_constant)(x[1], tuple(shape))
        y = g.values[-1] if yname else None
    if y is None:
        return None
    roll = r.random()
    if roll < 0.6:
        tmpls, exact = BINARY, x[3] and y[3] and x[1] in INTS
    elif roll < 0.8 and x[1] in FLOATS:
        tmpls, exact = BINARY_FLOAT, False
    elif x[3] and y[3]:
        tmpls, exact = BINARY_EXACT, True
    else:
        return None
    tmpl = tmpls[int(r.integers(len(tmpls)))]
    if x[1] in INTS and "+ 0.5" in tmpl:
        return None
    return g.emit(tmpl.format(x=x[0], y=y[0], xdt=f"tf.{x[1]}"), exact=exact)


def grow_matmul(g):
    r = g.rng
    dt = str(r.choice(FLOATS))
    m, k, n = (int(r.choice([1, 2, 3, 5, 0] if r.random() < 0.1 else [1, 2, 3, 5]))
               for _ in range(3))
    batch = [int(r.choice([1, 2, 3]))] if r.random() < 0.3 else []
    ta, tb = bool(r.random() < 0.3), bool(r.random() < 0.3)
    a = _source(g, dt, tuple(batch + ([k, m] if ta else [m, k])))
    b = _source(g, dt, tuple(batch + ([n, k] if tb else [k, n])))
    if a is None or b is None:
        return None
    out = g.emit(f"tf.matmul({a}, {b}, transpose_a={ta}, transpose_b={tb})")
    if out and r.random() < 0.5:
        bias = _source(g, dt, (n,))
        act = r.choice(["tf.nn.relu", "tf.tanh", "tf.identity"])
        out = g.emit(f"{act}(tf.nn.bias_add({out}, {bias}))")
    return out


def _source(g, dt, shape):
    """An existing value of that dtype and shape, else a new placeholder/constant."""
    have = [v for v in g.values if v[1] == dt and v[2] == shape and v[0] not in g.assigned]
    if have and g.rng.random() < 0.6:
        return have[int(g.rng.integers(len(have)))][0]
    return (g.add_placeholder if g.rng.random() < 0.6 else g.add_constant)(dt, shape)


def grow_nn(g):
    r = g.rng
    dt = str(r.choice(FLOATS))
    roll = r.random()
    if roll < 0.4:
        n, h, w, c, o = 1 + int(r.integers(2)), 2 + int(r.integers(4)), 2 + int(r.integers(4)), \
            1 + int(r.integers(3)), 1 + int(r.integers(3))
        kh, kw = int(r.integers(1, min(h, 3) + 1)), int(r.integers(1, min(w, 3) + 1))
        x = _source(g, dt, (n, h, w, c))
        f = _source(g, dt, (kh, kw, c, o))
        s = int(r.integers(1, 3))
        pad = r.choice(["SAME", "VALID"])
        out = g.emit(f"tf.nn.conv2d({x}, {f}, strides=[1, {s}, {s}, 1], padding='{pad}')")
        return _maybe_gradient(g, out, [x, f])
    if roll < 0.7:
        x = g.pick(lambda v: _float(v) and len(v[2]) == 4 and v[2][1] > 0 and v[2][2] > 0)
        if x is None:
            x = (_source(g, dt, (1, 4, 3, 2)), dt, (1, 4, 3, 2), True)
        pool = r.choice(["max_pool", "avg_pool"])
        if pool == "max_pool" and not x[3]:
            pool = "avg_pool"   # max-pool ties on computed values are legitimately flaky
        k = int(r.integers(1, 3))
        pad = r.choice(["SAME", "VALID"])
        out = g.emit(f"tf.nn.{pool}({x[0]}, ksize=[1, {k}, {k}, 1], strides=[1, 2, 1, 1], "
                     f"padding='{pad}')")
        return _maybe_gradient(g, out, [x[0]])
    b, c = 1 + int(r.integers(3)), 2 + int(r.integers(3))
    logits = _source(g, dt, (b, c))
    labels = g.emit(f"tf.constant({list(int(i) for i in r.integers(0, c, size=b))!r})",
                    exact=True)
    return g.emit(f"tf.nn.sparse_softmax_cross_entropy_with_logits(labels={labels}, "
                  f"logits={logits})")


MISC_ANY = ["tf.shape_n([{x}, {x}])[1]", "tf.split({x}, [1, -1], axis={ax})[1]",
            "tf.pad({x}, {pads}, constant_values=1.5)",
            "tf.cast(tf.where(tf.cast({x}, tf.bool)), tf.int32)",
            "tf.cast(tf.reduce_all(tf.logical_not(tf.cast({x}, tf.bool)), axis={ax}), tf.int32)",
            "tf.placeholder_with_default({x}, {shape})", "tf.fill(tf.shape({x}), 2.5)",
            "tf.zeros(tf.shape({x}), tf.{dt}) + {x}"]
MISC_SOURCES = ["tf.random_uniform({shape}, seed={seed}, dtype=tf.float64)",
                "tf.random_normal({shape}, seed={seed})",
                "tf.truncated_normal({shape}, seed={seed}, dtype=tf.float64)",
                "tf.random_uniform({shape}, maxval=7, dtype=tf.int32, seed={seed})",
                "tf.invert_permutation(tf.constant({perm}))",
                "tf.one_hot(tf.constant({ids}), 4, on_value=2.0, off_value=-1.0)"]


def grow_misc(g):
    r = g.rng
    if r.random() < 0.6:
        v = g.pick(lambda v: v[1] != "bool" and (v[3] or v[1] in INTS))
        if v is None:
            return None
        tmpl = MISC_ANY[int(r.integers(len(MISC_ANY)))].replace("{dt}", v[1])
        return g.emit(_fill(g, tmpl, v), exact=v[3])
    shape = list(g.random_shape(int(r.integers(0, 3))))
    n = int(r.integers(1, 6))
    tmpl = MISC_SOURCES[int(r.integers(len(MISC_SOURCES)))]
    exact = "int32" in tmpl or "tf.constant" in tmpl
    return g.emit(tmpl.format(shape=shape, seed=int(r.integers(1, 99)),
                              perm=[int(i) for i in r.permutation(n)],
                              ids=[int(i) for i in r.integers(-1, 5, size=n)]), exact=exact)


def _maybe_gradient(g, out, wrt):
    """Half the time, also the gradient of `out` (times a constant) with respect to one
    of `wrt`: the backprop ops of conv and pooling appear only this way."""
    if out is None or g.rng.random() < 0.5:
        return out
    y = next(v for v in g.values if v[0] == out)
    w = g.add_constant(y[1], y[2])
    x = wrt[int(g.rng.integers(len(wrt)))]
    return g.emit(f"tf.gradients(tf.reduce_sum({out} * {w}), [{x}])[0]") or out


def grow_gradient(g):
    """d(sum(y * w)) / dx for a float value y and one of the values it may depend on."""
    r = g.rng
    ys = [v for v in g.values if _float(v) and v[0] not in g.assigned]
    if not ys:
        return None
    y = ys[-1 - int(r.integers(min(len(ys), 4)))]
    xs = [v for v in g.values if _float(v) and v[0] != y[0] and v[0] not in g.assigned]
    if not xs:
        return None
    x = xs[int(r.integers(len(xs)))]
    w = g.add_constant(y[1], y[2])
    if w is None:
        return None
    name = g.emit(f"tf.gradients(tf.reduce_sum({y[0]} * {w}), [{x[0]}])[0]")
    if name and g.ns.get(name) is None:
        # no path from x to y: TF returns None; nothing to fetch
        g.values = [v for v in g.values if v[0] != name]
        return None
    return name


def grow_state(g):
    """A variable read as a value, or assigned once (its value fetched in a second run),
    possibly as the control input of a later op."""
    r = g.rng
    dt = str(r.choice(FLOATS + ("int32",)))
    shape = g.random_shape(int(r.integers(0, 3)))
    var = g.add_variable(dt, shape)
    if var is None:
        return None
    if r.random() < 0.4:
        return var
    g.values = [v for v in g.values if v[0] != var]   # a value read racing the assign
    g.assigned.append(var)
    src = _source(g, dt, shape)
    fn = r.choice(["tf.assign", "tf.assign_add", "tf.assign_sub", "scatter"])
    if fn != "scatter":
        upd = g.emit(f"{fn}({var}, {src})")
    elif shape and shape[0] > 0:
        # rows 0 and n-1 (the same row twice when n is 1: adds sum, an update takes one)
        scatter = r.choice(["tf.scatter_add", "tf.scatter_sub", "tf.scatter_update"])
        rows = "[0]" if scatter == "tf.scatter_update" else f"[0, {shape[0] - 1}]"
        updates = f"{src}[:1]" if rows == "[0]" else f"tf.concat([{src}[:1], {src}[-1:]], 0)"
        upd = g.emit(f"{scatter}({var}, {rows}, {updates})")
    else:
        upd = g.emit(f"tf.assign({var}, {src})")
    if upd is None:
        return None
    g.values = [v for v in g.values if v[0] != upd]   # the ref's value: unordered reads
    # Control dependency on the assign: a read of the variable inside the block sees the
    # assigned value (TF1's rule); an op on other values or a constant inside it makes the
    # assign run although nothing else needs it.
    roll = r.random()
    if roll < 0.3:
        return g.emit(f"tf.identity({var}) * 2 + 1" if dt != "int32" else
                      f"tf.identity({var})", control=upd)
    if roll < 0.4:
        return g.emit(f"tf.constant(3, dtype=tf.{dt})", control=upd)
    x = g.pick(lambda v: _float(v) and v[0] not in g.variables)
    if x is not None and roll < 0.8:
        return g.emit(f"tf.tanh({x[0]})", control=upd)
    g.extra_fetch.append(upd)
    return upd


def generate(seed, max_ops=8):
    rng = np.random.default_rng(seed)
    g = Gen(rng, max_ops)
    for _ in range(1 + int(rng.integers(2))):
        dt = str(rng.choice(FLOATS + FLOATS + INTS))
        g.add_placeholder(dt, g.random_shape())
    made, tries = 0, 0
    while made < max_ops and tries < max_ops * 6:
        tries += 1
        if grow_one(g):
            made += 1
    # every value nothing else consumes is fetched: one compile checks the whole graph
    used = set().union(*[_names_in(ln.split(" = ", 1)[1]) for ln in g.lines]) if g.lines \
        else set()
    computed = [v[0] for v in g.values if v[0] not in g.feeds and v[0] not in g.variables]
    leaves = [n for n in computed if n not in used]
    fetches = list(dict.fromkeys(leaves + g.extra_fetch))
    fetches += [n for n in _control_lines(g) if n not in fetches]
    for extra in list(fetches):
        if not isinstance(g.ns.get(extra), (tf.Tensor, tf.Operation)):
            fetches.remove(extra)
    prog = Program(g.lines, g.feeds, fetches, g.placeholders)
    prog.assigned = list(g.assigned)
    prog.precision = _precisions(g)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prog.build()
    except Exception:
        # some op needs a static dim: this graph runs with all dims known
        prog.placeholders = {n: list(prog.feeds[n].shape) for n in prog.placeholders}
    return prog


def _precisions(g):
    """{name: least precise float dtype among the name's own and its inputs', transitively}."""
    order = {"float16": 0, "float32": 1, "float64": 2}
    low = {n: v.dtype.name for n, v in g.feeds.items() if v.dtype.name in order}
    for name, dt, _, _ in g.values:
        if dt in order:
            low.setdefault(name, dt)
    for line in g.lines:
        name = _defined(line)
        t = g.ns.get(name)
        cands = [low[w] for w in _names_in(line) if w != name and w in low]
        if isinstance(t, tf.Tensor) and t.dtype.name in order:
            cands.append(t.dtype.name)
        if cands:
            low[name] = min(cands, key=order.get)
    return low


def _control_lines(g):
    return [ln.split("\n")[1].strip().split(" = ")[0] for ln in g.lines
            if ln.startswith("with tf.control_dependencies")]


# Registered op types the generator never builds, and why (test_differential checks that
# every other type does show up).
NOT_GENERATED = {
    **dict.fromkeys(["HistogramSummary", "ImageSummary", "AudioSummaryV2", "MergeSummary",
                     "ScalarSummary"],
                    "summaries are host-side strings, not numbers to compare"),
    **dict.fromkeys(["IteratorGetNext", "MakeIterator", "IteratorToStringHandle",
                     "IteratorGetNextFromStringHandle"], "tf.data pipelines are host-side"),
    "ParseExampleProtos": "parses serialized tf.train.Example strings: test_tf_example",
    **dict.fromkeys(["LogUniformCandidateSampler", "UniformCandidateSampler"],
                    "host-side samplers with their own generator"),
    **dict.fromkeys(["IsVariableInitialized", "UninitializedNames", "VariableValueOrDefault"],
                    "variable-status queries: every generated graph initializes its variables"),
    "NoOp": "ordering only: no value (control dependencies use assigns as inputs)",
    **dict.fromkeys(["If", "While", "TensorArrayV3", "TensorArrayScatterV3",
                     "TensorArrayGatherV3", "TensorArrayScatterGrad", "TensorArrayGatherGrad"],
                    "control flow carries graphs of its own, which the generator does not "
                    "build: tests/test_control_flow.py and test_dynamic_rnn.py"),
    "Assert": "fails by design when its condition is false: tests/test_control_flow.py",
    "RaggedBlock": "made only inside the backward loop of a loop whose variables change "
                   "shape: tests/test_loop_shape_invariants.py",
    **dict.fromkeys(["MpiAllgather", "MpiAllreduce", "MpiBroadcast"],
                    "MPI collectives: tests/test_distribute.py runs them on 1, 2 and 3 ranks"),
    "MaxPoolGradGrad": "second derivatives of max-pool: rare in random graphs; "
                       "test_nn_ops covers it",
    "GatherGrad": "generated only when a gradient crosses a gather: seed-dependent",
    "MirrorPadGrad": "generated only when a gradient crosses a reflect pad: seed-dependent",
    "MaxPoolGrad": "generated only when a gradient crosses a max-pool: seed-dependent",
    **dict.fromkeys(["PyFunc", "Print", "PrintV2"],
                    "host ops running the user's Python or writing text"),
    "TopKV2": "host-side sort; test_tf1_ops_breadth and test_public_ops_dtypes check it",
    **dict.fromkeys(["FIFOQueueV2", "PaddingFIFOQueueV2", "RandomShuffleQueueV2",
                     "QueueEnqueueV2",
                     "QueueEnqueueManyV2", "QueueDequeueV2", "QueueDequeueManyV2",
                     "QueueDequeueUpToV2", "QueueCloseV2", "QueueSizeV2", "QueueIsClosedV2"],
                    "queues: host state shared between threads (test_tf1_queues)"),
    "CountUpTo": "ends at its limit with OutOfRangeError (test_tf1_queues)",
    **dict.fromkeys(["AsString", "DecodeBase64", "DecodeRaw", "EncodeBase64", "ReduceJoin",
                     "RegexFullMatch", "RegexReplace", "StaticRegexFullMatch",
                     "StaticRegexReplace", "StringJoin", "StringLength", "StringLower",
                     "StringSplit", "StringSplitV2", "StringStrip", "StringToHashBucketFast",
                     "StringToNumber", "StringUpper", "Substr"],
                    "string ops: host-side bytes, not numbers to compare (test_strings)"),
    **dict.fromkeys(["DecodeBmp", "DecodeGif", "DecodeImage", "DecodeJpeg", "DecodePng",
                     "EncodeJpeg", "EncodePng", "IsJpeg"],
                    "image files decoded on the host (test_image_decode)"),
    **dict.fromkeys(["HashTable", "InitializeTable", "InitializeTableFromTextFile",
                     "LookupTableFind", "LookupTableSize"],
                    "lookup tables: host state keyed by strings (test_lookup)"),
    **dict.fromkeys(["MatchingFiles", "ReadFile", "WriteFile", "FixedLengthRecordReaderV2",
                     "TFRecordReaderV2", "TextLineReaderV2", "WholeFileReaderV2",
                     "ReaderNumRecordsProducedV2", "ReaderNumWorkUnitsCompletedV2",
                     "ReaderReadUpToV2", "ReaderReadV2", "ReaderResetV2"],
                    "files and readers on the host (test_strings, test_readers)"),
    "SparseToDense": "host-only: the same NumPy kernel on every backend (test_sparse_to_dense)",
}


# ---------------------------------------------------------------------------------------
# Shrinking

def _defined(line):
    return line.split("\n")[-1].strip().split(" = ")[0]


def dce(prog):
    """Drops statements nothing fetched or assigned depends on."""
    needed = set(prog.fetches) | set(prog.assigned)
    keep = []
    for line in reversed(prog.lines):
        name = _defined(line)
        if name in needed:
            keep.append(line)
            needed |= {w for w in _names_in(line) if w != name}
    p = prog.copy()
    p.lines = list(reversed(keep))
    p.feeds = {n: v for n, v in prog.feeds.items() if n in needed}
    p.placeholders = {n: s for n, s in prog.placeholders.items() if n in needed}
    p.assigned = [v for v in prog.assigned if v in needed and any(_defined(l) == v for l in p.lines)]
    return p


def _names_in(line):
    return set(re.findall(r"\bv\d+\b", line))


def shrink(prog, fails, log=lambda s: None):
    """Delta-debugging over fetches and statements; `fails(prog)` says if it still fails."""
    # 1. one fetch (or one assigned variable) that fails alone
    for f in prog.fetches + prog.assigned:
        p = prog.copy()
        p.fetches = [f] if f in prog.fetches else []
        p.assigned = [f] if f in prog.assigned else []
        p = dce(p)
        if p.fetches or p.assigned:
            if fails(p):
                prog = p
                break
    changed = True
    while changed:
        changed = False
        ref_ns = _reference_values(prog)
        for line in reversed(list(prog.lines)):
            name = _defined(line)
            if name in prog.fetches or name in prog.assigned or ref_ns is None:
                continue
            value = ref_ns.get(name)
            if not isinstance(value, np.ndarray):
                continue
            p = cut_at(prog, line, name, value)
            if p is not None and len(p.lines) < len(prog.lines) and fails(p):
                log(f"  shrunk to {len(p.lines)} statements")
                prog, changed = p, True
                break
        if not changed:
            # drop declared-unknown dims and simplify feeds one placeholder at a time
            for n, s in prog.placeholders.items():
                if s is not None and None not in s:
                    continue
                p = prog.copy()
                p.placeholders[n] = list(prog.feeds[n].shape)
                if fails(p):
                    prog, changed = p, True
                    break
    return prog


def cut_at(prog, line, name, value):
    """The program with `name` computed by its reference value fed as a placeholder."""
    p = prog.copy()
    idx = p.lines.index(line)
    p.lines = p.lines[:idx] + p.lines[idx + 1:]
    p.feeds[name] = value
    p.placeholders[name] = list(value.shape)
    p = dce(p)
    return p


def _reference_values(prog):
    """Reference values of every tensor the program defines (for cutting)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ns = prog.build()
            names = [_defined(line) for line in prog.lines]
            # variables and their updates stay: cutting them would change the state
            ts = {n: ns[n] for n in names if isinstance(ns.get(n), tf.Tensor)
                  and ns[n].op.type not in ("VariableV2", "Assign", "AssignAdd", "AssignSub")}
            feeds = {ns[n]: v for n, v in prog.feeds.items()}
            with tf.Session(config=tf.ConfigProto(backend="reference")) as sess:
                sess.run(tf.global_variables_initializer())
                vals = sess.run(list(ts.values()), feeds)
            return {n: np.asarray(v) for n, v in zip(ts, vals)}
    except Exception:
        return None


# ---------------------------------------------------------------------------------------
# Driver

def run_many(seed, count, backends=BACKENDS, max_ops=8, out=sys.stdout, shrink_failures=True,
             progress_every=100):
    """Runs `count` random graphs from `seed`; returns (graphs run, list of failures)."""
    failures = []
    t0 = time.time()
    for i in range(count):
        s = seed * 1_000_003 + i
        prog = generate(s, max_ops)
        if not prog.fetches and not prog.assigned:
            prog = generate(s + 7_777_777, max_ops)
        bad = check(prog, list(backends))
        if bad:
            backend, why = bad
            print(f"[graph {s}] MISMATCH on {backend}: {why}", file=out, flush=True)
            small = prog
            if shrink_failures:
                small = shrink(prog, lambda p: check(p, list(backends)) is not None)
                again = check(small, list(backends))
                print(f"  minimized: {again[1] if again else why}", file=out)
            print("----- script -----\n" + small.script() + "------------------", file=out,
                  flush=True)
            failures.append((s, backend, why, small))
        if progress_every and (i + 1) % progress_every == 0:
            print(f"{i + 1}/{count} graphs, {len(failures)} mismatches, "
                  f"{time.time() - t0:.0f}s", file=out, flush=True)
    return count, failures


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--max-ops", type=int, default=10)
    ap.add_argument("--no-shrink", action="store_true")
    args = ap.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    t0 = time.time()
    n, failures = run_many(args.seed, args.count, backends, args.max_ops,
                           shrink_failures=not args.no_shrink)
    print(f"summary: seed {args.seed}: {n} graphs x {len(backends)} backends "
          f"({','.join(backends)}), {len(failures)} mismatches, {time.time() - t0:.0f}s")
    for s, b, why, _ in failures:
        print(f"  graph {s} on {b}: {why}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
