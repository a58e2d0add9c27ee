"""Splits a module's LLVM IR into parts that LLVM optimizes and emits independently, so
that several processes can work on one big module at once (runtime/jit.py loads the
parts' object files into one MCJIT engine: still one native entry call per run). XLA's
CPU backend splits its module for parallel codegen the same way.

A part defines some of the module's functions and declares the others it refers to;
every function is defined in exactly one part. The functions that the optimizer could
see across stay together: a caller and its callees are kept in one part (so the O3
inliner and the interprocedural attribute inference find them where they are today),
except that the calls of an `optnone` function (the entry: nothing is inlined into it)
and the calls to a function shared by more than SHARED_MAX others (the thread-team
runtime's graphc_omp_parallel, a padding helper of every convolution) do not tie the
caller to the callee. Every global variable is defined in part 0, and the other parts
declare the ones they use (`external global` of the same type). A name defined in one
part and used in another loses `internal`/`private`, so that the loader can link it.

What this cannot split safely (aliases, comdats, numbered or escaped names, globals or
signatures it does not parse) it leaves whole: `split` returns None, and the module is
compiled as one, as before.
"""
import re

# a function whose callers number more than this is a service of the whole module: its
# callers go to different parts (it is not inlined into them: a thread team's entry
# point, a padding loop)
SHARED_MAX = 4
# an optnone function's text costs LLVM about a quarter as much per byte as an optimized
# one's (codegen only; measured on compile_scale_256, whose entry's segments of 128 calls
# took about 0.5 us per byte, its kernels 2)
_OPTNONE_WEIGHT = 0.25

_DEFINE = re.compile(r'^define ([^\n]*?)@("[^"\\]*"|[-\w$.]+)\(([^\n]*)\n?\{\n', re.M)
_ANY_DEFINE = re.compile(r"^define ", re.M)
_DECLARE = re.compile(r'^declare [^\n]*?@("[^"\\]*"|[-\w$.]+)\([^\n]*\n?', re.M)
_NAME_REF = re.compile(r'@("[^"]*"|[-\w$.]+)')
_GLOBAL = re.compile(r'^@("[^"\\]*"|[-\w$.]+) = ([^\n]*)$', re.M)
_LOCAL_LINKAGE = re.compile(r"\b(internal|private)\s+")
# words that may stand before `global`/`constant` in a definition this module moves
_GLOBAL_PREFIX = {"internal", "private", "dso_local", "unnamed_addr", "local_unnamed_addr",
                  "hidden", "default", "protected"}
_FUNCTION_PREFIX = {"internal", "private", "dso_local", "hidden", "default", "protected"}
_UNSPLITTABLE_HEADER = re.compile(r"^(\$|@[^\n]* = [^\n]*\b(alias|ifunc)\b)|\bcomdat\b",
                                  re.M)
_UNSPLITTABLE_SIGNATURE = re.compile(r"\b(personality|prefix|prologue|comdat|section|gc)\b")
_OPEN, _CLOSE = "[{<(", "]}>)"
_VECTOR_RETURN = re.compile(r"<[^<>]*>\s*$")
_VARIANTS = re.compile(r'"vector-function-abi-variant"="([^"]*)"')
_VARIANT_NAME = re.compile(r"\(([-\w$.]+)\)")


class _Function:
    def __init__(self, match, end):
        self.name = _unquote(match.group(2))
        self.start, self.end = match.start(), end
        self.prefix = match.group(1)  # linkage, attributes and return type
        self.signature = match.group(0)[len("define "):].rstrip().rstrip("{").rstrip()
        self.part = None


def split(llvm_ir, loads, min_weight=0):
    """The module's text cut into at most len(loads) parts ([part 0's text, ...]), or
    None when it is not split: its functions weigh less than `min_weight` in all (see
    `weight`), make a single group, or it holds something this does not parse.

    loads: the work each part starts with, in the unit `weight` counts (a part compiled by
    a process still starting begins later); the groups of functions are dealt to the part
    with the least work so far, largest first."""
    if len(loads) < 2:
        return None
    functions = _functions(llvm_ir)
    if functions is None or sum(weight(llvm_ir, f) for f in functions) < min_weight:
        return None
    splittable = _splittable(llvm_ir, functions)
    if splittable is None:
        return None
    header, globals_, refs = splittable
    groups = _groups(functions, refs)
    if len(groups) < 2:
        return None
    work = list(loads)
    for group in sorted(groups, key=lambda g: -sum(weight(llvm_ir, f) for f in g)):
        part = min(range(len(work)), key=work.__getitem__)
        work[part] += sum(weight(llvm_ir, f) for f in group)
        for f in group:
            f.part = part
    used = sorted({f.part for f in functions})
    if len(used) < 2:
        return None
    renumber = {old: new for new, old in enumerate(used)}  # no part without a function
    for f in functions:
        f.part = renumber[f.part]
    return [_part_text(llvm_ir, functions, refs, globals_, header, p)
            for p in range(len(used))]


def cut_optnone(llvm_ir, min_bytes):
    """[the rest, the optnone functions] of the module's text, or None when its optnone
    functions (the entry and its segments: backends/cpu/entry.py) are less than
    `min_bytes` of text, all of it, or it holds something this does not parse.

    LLVM's O3 code generator takes as long per byte over an optnone function as over a
    kernel (its machine passes, the greedy register allocator, run whatever the
    function's attributes), while the entry's straight run of calls gains nothing from
    them: runtime/jit.py emits the second part at LLVM's O0 (fast instruction selection
    and register allocation), about half the time over the same text."""
    functions = _functions(llvm_ir)
    if functions is None:
        return None
    cold = [f for f in functions if "optnone" in f.signature]
    if not cold or len(cold) == len(functions) or \
            sum(f.end - f.start for f in cold) < min_bytes:
        return None
    splittable = _splittable(llvm_ir, functions)
    if splittable is None:
        return None
    header, globals_, refs = splittable
    for f in functions:
        f.part = 1 if "optnone" in f.signature else 0
    return [_part_text(llvm_ir, functions, refs, globals_, header, p) for p in (0, 1)]


def _splittable(llvm_ir, functions):
    """(header, globals, references) of a module whose functions can go to different
    parts, or None when its header holds what a part could not declare."""
    header = _header(llvm_ir, functions)
    if _UNSPLITTABLE_HEADER.search(header):
        return None
    globals_ = _globals(header)
    by_name = {f.name: f for f in functions}
    if globals_ is None or any(_unquote(n) in by_name for n in _NAME_REF.findall(header)):
        return None  # (a global's initializer naming a function would tie it to part 0)
    return header, globals_, _all_references(llvm_ir, functions, by_name)


def separate(llvm_ir, wanted):
    """(rest, groups): the module's text without the closed groups of the functions that
    `wanted(name)` selects, or None when it holds something this does not parse.

    A group is a set of wanted functions that refer to each other (a conv function and its
    tiles); it is closed when its functions refer to nothing but each other and functions
    the module only declares (intrinsics, libm), so it compiles alone to the same code
    whatever module it came from. Each group is a module text of its own (the declarations
    it calls, then its functions by name; those the rest calls lose `internal`, since it
    calls them across objects); `rest` declares the groups' functions in their place. A
    wanted function that refers to a global or to a function outside its group stays in
    `rest`."""
    functions = _functions(llvm_ir)
    if functions is None:
        return None
    header = _header(llvm_ir, functions)
    globals_ = _globals(header)
    if globals_ is None or _UNSPLITTABLE_HEADER.search(header):
        return None
    by_name = {f.name: f for f in functions}
    declared = {_unquote(m.group(1)): m.group(0) for m in _DECLARE.finditer(header)}
    refs = _all_references(llvm_ir, functions, by_name)
    chosen = [f for f in functions if wanted(f.name)]
    groups = []
    for group in _groups(chosen, refs, shared_max=None):
        names = {f.name for f in group}
        if all(r in names or r in declared for f in group for r in refs[f.name]):
            groups.append(sorted(group, key=lambda f: f.name))
    if not groups:
        return llvm_ir, []
    for f in functions:
        f.part = 0
    for k, group in enumerate(groups, start=1):
        for f in group:
            f.part = k
    rest = _part_text(llvm_ir, functions, refs, globals_, header, 0)
    called = {r for f in functions if f.part == 0 for r in refs[f.name]}
    return rest, [_closed_text(llvm_ir, group, refs, declared, called) for group in groups]


def _closed_text(llvm_ir, group, refs, declared, called):
    """The group as a module: its entry points (what `called` names) lose `internal`, its
    other functions keep it, so that LLVM still sees all their callers."""
    names = {f.name for f in group}
    calls = sorted({r for f in group for r in refs[f.name]} - names)
    texts = []
    for f in group:
        text = llvm_ir[f.start:f.end]
        if f.name in called:
            text = "define " + _LOCAL_LINKAGE.sub("", text[len("define "):], count=1)
        texts.append(text)
    return "".join(declared[name] for name in calls) + "".join(texts)


def weight(llvm_ir, function):
    """The LLVM work a function costs, in bytes of its text (optnone functions: cheaper)."""
    size = function.end - function.start
    return size * _OPTNONE_WEIGHT if "optnone" in function.signature else size


def defined_functions(llvm_ir):
    """The names of the functions the text defines, in order (tests check the parts)."""
    return [f.name for f in _functions(llvm_ir) or []]


# ------------------------------------------------------------------ reading
def _unquote(name):
    return name[1:-1] if name.startswith('"') else name


def _functions(llvm_ir):
    out = []
    for m in _DEFINE.finditer(llvm_ir):
        prefix = _VECTOR_RETURN.sub("vector", m.group(1))  # one word, as other types
        if _UNSPLITTABLE_SIGNATURE.search(m.group(3)) or \
                not set(prefix.split()[:-1]) <= _FUNCTION_PREFIX | _ATTRIBUTE_WORDS or \
                m.group(2).isdigit():
            return None
        end = llvm_ir.find("\n}\n", m.end() - 1)
        if end < 0:
            if not llvm_ir.endswith("\n}"):
                return None
            end = len(llvm_ir)
        else:
            end += 3
        out.append(_Function(m, end))
    for before, after in zip(out, out[1:]):
        if after.start < before.end:
            return None
    if len(out) != len(_ANY_DEFINE.findall(llvm_ir)):
        return None  # a definition the pattern above does not read (an escaped name)
    return out


# return-value attributes that may stand between the linkage and the return type
_ATTRIBUTE_WORDS = {"noalias", "nonnull", "noundef", "signext", "zeroext", "inreg",
                    "fastcc", "ccc", "coldcc", "unnamed_addr", "local_unnamed_addr"}


def _header(llvm_ir, functions):
    """The text outside the function definitions, in order."""
    pieces, at = [], 0
    for f in functions:
        pieces.append((at, f.start))
        at = f.end
    pieces.append((at, len(llvm_ir)))
    return "".join(llvm_ir[s:e] for s, e in pieces)


def _globals(header):
    """{name: (definition line, declaration line, linkage-free definition)} of the
    global variables the module defines, or None when one does not parse."""
    out = {}
    for m in _GLOBAL.finditer(header):
        name, rest = _unquote(m.group(1)), m.group(2)
        if name.isdigit():
            return None
        words = rest.split(" ")
        k = 0
        while k < len(words) and words[k] in _GLOBAL_PREFIX:
            k += 1
        if k < len(words) and words[k] == "external":
            continue  # a declaration already: every part has it
        if k >= len(words) or words[k] not in ("global", "constant") or \
                not set(words[:k]) <= _GLOBAL_PREFIX:
            return None
        value_type = _leading_type(" ".join(words[k + 1:]))
        if value_type is None:
            return None
        quoted = m.group(1)
        out[name] = (m.group(0),
                     f"@{quoted} = external {words[k]} {value_type}",
                     f"@{quoted} = " + _LOCAL_LINKAGE.sub("", rest, count=1))
    return out


def _leading_type(text):
    """The type that `text` ("[4 x float] zeroinitializer, align 8") begins with."""
    if not text:
        return None
    if text[0] not in _OPEN:
        end = len(text)
        for stop in (" ", ","):
            at = text.find(stop)
            if at >= 0:
                end = min(end, at)
        return text[:end]
    depth = 0
    for i, c in enumerate(text):
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                return text[:i + 1]
        elif c == '"':
            return None
    return None


def _references(body, by_name, own):
    names = {_unquote(n) for n in _NAME_REF.findall(body)}
    names.discard(own)
    return names


def _all_references(llvm_ir, functions, by_name):
    """{function: the names it refers to}. A function with vector variants (LLVM's vector
    function ABI attribute: graphc/compiler/backends/cpu/math_library.py) is called as
    a variant wherever the loop vectorizer widens a call of it, so a caller refers to
    its variants too: a part declares them beside it, else its loops call the scalar
    function once per element."""
    refs = {f.name: _references(llvm_ir[f.start:f.end], by_name, f.name)
            for f in functions}
    variants = {f.name: set(_VARIANT_NAME.findall(m.group(1)))
                for f in functions for m in _VARIANTS.finditer(f.signature)}
    if variants:
        for f in functions:
            for name in list(refs[f.name]):
                refs[f.name] |= variants.get(name, set()) - {f.name}
    return refs


# ------------------------------------------------------------------ grouping
def _groups(functions, refs, shared_max=SHARED_MAX):
    """The functions in groups that stay together: union-find over the references that
    tie a caller to its callee (see the module's docstring; shared_max None: every
    reference ties)."""
    by_name = {f.name: f for f in functions}
    # functions with vector variants (backends/cpu/math_library.py) and the variants stay
    # with their callers however many: in another part, the vectorizer of a caller's
    # part left its calls scalar (an LSTM's gate kernels took 14.5 ms per step in parts
    # against 2.6 whole: O3 drops a part's declarations of variants that only an
    # attribute names, and keeping them declared was not enough either)
    vectorized = {name for f in functions for m in _VARIANTS.finditer(f.signature)
                  for name in [f.name] + _VARIANT_NAME.findall(m.group(1))}
    referrers = {f.name: 0 for f in functions}
    for f in functions:
        for name in refs[f.name]:
            if name in referrers:
                referrers[name] += 1
    parent = {f.name: f.name for f in functions}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for f in functions:
        if "optnone" in f.signature:
            continue
        for name in refs[f.name]:
            if name in by_name and (shared_max is None or referrers[name] <= shared_max
                                    or name in vectorized):
                parent[find(name)] = find(f.name)
    groups = {}
    for f in functions:
        groups.setdefault(find(f.name), []).append(f)
    return list(groups.values())


# ------------------------------------------------------------------ writing
def _part_text(llvm_ir, functions, refs, globals_, header, part):
    """Part `part`: the header (globals defined in part 0, declared elsewhere), its own
    functions, and declarations of the others it refers to."""
    used_elsewhere = set()  # names some other part refers to
    needed = set()  # names this part refers to
    for f in functions:
        if f.part == part:
            needed |= refs[f.name]
        else:
            used_elsewhere |= refs[f.name]
    out, at = [], 0
    for f in functions:
        out.append(_part_header(llvm_ir[at:f.start], globals_, part, needed,
                                used_elsewhere))
        if f.part == part:
            text = llvm_ir[f.start:f.end]
            if f.name in used_elsewhere:
                text = "define " + _LOCAL_LINKAGE.sub("", text[len("define "):], count=1)
            out.append(text)
        elif f.name in needed:
            out.append("declare " + _LOCAL_LINKAGE.sub("", f.signature, count=1) + "\n")
        at = f.end
    out.append(_part_header(llvm_ir[at:], globals_, part, needed, used_elsewhere))
    return "".join(out)


def _part_header(text, globals_, part, needed, used_elsewhere):
    def replace(m):
        name = _unquote(m.group(1))
        if name not in globals_:
            return m.group(0)
        definition, declaration, exported = globals_[name]
        if part == 0:
            return exported if name in used_elsewhere else definition
        return declaration if name in needed else ""
    return _GLOBAL.sub(replace, text)
