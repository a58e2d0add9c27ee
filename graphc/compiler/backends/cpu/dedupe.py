"""One LLVM function per distinct kernel: kernels whose code is identical share it.

A deep model repeats its layers: the 128 hidden layers of an MLP training step make 128
copies of the same gemm, bias-gradient and update kernels, which differ only in the
buffers the entry passes them. LLVM optimized and emitted every copy (about 17 ms each),
so its time grew with the depth while the distinct code did not. Kernel `n`'s functions
are `kernel_<n>_<label>` and that name plus a suffix (a gemm's ".gemm.task"); two kernels
are the same when their functions' text is, their own names aside. The later one's
functions are dropped and every reference to them names the first one's instead.

An unrolled RNN repeats its step with one difference: the row of a stacked tensor each
step reads, a literal offset in the index arithmetic. kernel_reuse.py lowers the steps
that read their row through a Split or Unpack once (it moves the row's pointer); the
others (a strided slice's constant begin, x[:, t, :]) are built per step and
merge_offset_kernels gives them one function that takes the offsets as arguments.
"""
import re

_DEFINE = re.compile(r'^define [^@]*@"(kernel_(\d+)_\w*)', re.M)
_KERNEL_REF = re.compile(r'@"(kernel_(\d+)_\w*)')


def merge_identical_kernels(llvm_ir):
    """The IR with each kernel identical to an earlier one replaced by that one."""
    chunks = _split(llvm_ir)
    bases, texts = {}, {}
    for i, (number, name, text) in enumerate(chunks):
        if number is None:
            continue
        texts.setdefault(number, []).append(i)
        if number not in bases or len(name) < len(bases[number]):
            bases[number] = name  # the kernel's own function: the shortest of its names
    keeper, renamed = {}, {}
    for number in sorted(texts, key=int):
        # its functions' names and the labels made from them (a thread team's blocks)
        own_name = re.compile(re.escape(bases[number]) + r"(?![0-9A-Za-z])")
        key = "\n".join(own_name.sub("KERNEL", chunks[i][2]) for i in texts[number])
        first = keeper.setdefault(key, number)
        if first != number:
            renamed[number] = (bases[number], bases[first])
    if not renamed:
        return llvm_ir
    kept = [text for number, _, text in chunks if number not in renamed]
    return _KERNEL_REF.sub(lambda m: _rename(m, renamed), "".join(kept))


def _rename(match, renamed):
    name, number = match.group(1), match.group(2)
    if number not in renamed:
        return match.group(0)
    base, target = renamed[number]
    return '@"' + target + name[len(base):]


def _split(llvm_ir):
    """[(kernel number or None, function name or None, text)] covering the IR in order:
    each kernel function's definition, and the text between them."""
    out, pos = [], 0
    for m in _DEFINE.finditer(llvm_ir):
        end = llvm_ir.find("\n}\n", m.start())
        if end < 0:
            break
        end += 3
        out.append((None, None, llvm_ir[pos:m.start()]))
        out.append((m.group(2), m.group(1), llvm_ir[m.start():end]))
        pos = end
    out.append((None, None, llvm_ir[pos:]))
    return out


# An index offset: `add i64 <value>, <literal>` (llvmlite's names are quoted). Adds with
# flags are the loops' own counters and stay out of it.
_OFFSET = re.compile(r'^(  %"[^"]+" = add i64 %"[^"]+", )(-?\d+)$', re.M)
_PARAMS_END = re.compile(r'\)( [\w ]*)?\n\{', re.M)


def merge_offset_kernels(llvm_ir):
    """The IR with kernels identical up to the literal offsets of their index adds (an
    unrolled RNN's step: each step reads its row of a stacked tensor) sharing one
    function that takes the offsets that differ as trailing i64 arguments; each call
    passes its own kernel's. Only kernels of one function whose every use is a direct
    call are merged (a thread team's task takes its function by address, with fixed
    arguments)."""
    chunks = _split(llvm_ir)
    groups = {}
    for i, (number, name, text) in enumerate(chunks):
        if number is None:
            continue
        shape = _OFFSET.sub(r"\1#", text.replace(f'@"{name}"', '@"KERNEL"'))
        groups.setdefault(shape, []).append(i)
    counts = _kernel_function_counts(chunks)
    called = _only_called(llvm_ir)
    merged = {}  # function name -> (kept function name, its offsets)
    replacement = {}  # chunk index -> text
    for members in groups.values():
        members = [i for i in members
                   if counts[chunks[i][0]] == 1 and chunks[i][1] in called]
        if len(members) < 2:
            continue
        offsets = [[int(m.group(2)) for m in _OFFSET.finditer(chunks[i][2])]
                   for i in members]
        varying = [k for k in range(len(offsets[0]))
                   if len({o[k] for o in offsets}) > 1]
        kept_text = _with_offset_params(chunks[members[0]][2], varying)
        if kept_text is None:
            continue
        keep = chunks[members[0]][1]
        replacement[members[0]] = kept_text
        for i, offs in zip(members, offsets):
            merged[chunks[i][1]] = (keep, [offs[k] for k in varying])
            if i != members[0]:
                replacement[i] = ""
    if not merged:
        return llvm_ir
    text = "".join(replacement.get(i, chunk[2]) for i, chunk in enumerate(chunks))
    return _CALL.sub(lambda m: _offset_call(m, merged), text)


_CALL = re.compile(r'call i32 @"(kernel_\d+_\w*)"\(([^()\n]*)\)$', re.M)


def _offset_call(match, merged):
    name, args = match.group(1), match.group(2)
    if name not in merged:
        return match.group(0)
    keep, offsets = merged[name]
    extra = "".join(f", i64 {o}" for o in offsets)
    return f'call i32 @"{keep}"({args}{extra})'


def _with_offset_params(text, varying):
    """The function with the offsets at positions `varying` read from new trailing
    parameters, or None when its parameter list is not where it is looked for."""
    param = {k: f'%"offset.{j}"' for j, k in enumerate(varying)}
    count = iter(range(len(_OFFSET.findall(text))))

    def use(m):
        k = next(count)
        return m.group(1) + param[k] if k in param else m.group(0)
    body = _OFFSET.sub(use, text)
    end = _PARAMS_END.search(body)
    if end is None:
        return None
    params = ", ".join(f"i64 {p}" for p in param.values())
    if params and body[end.start() - 1] != "(":
        params = ", " + params
    return body[:end.start()] + params + body[end.start():]


def _kernel_function_counts(chunks):
    counts = {}
    for number, _, _ in chunks:
        if number is not None:
            counts[number] = counts.get(number, 0) + 1
    return counts


def _only_called(llvm_ir):
    """The kernel functions whose every use is a direct call on its own line."""
    uses, calls = {}, {}
    for m in _KERNEL_REF.finditer(llvm_ir):  # a function's definition counts once
        uses[m.group(1)] = uses.get(m.group(1), 0) + 1
    for m in _CALL.finditer(llvm_ir):
        calls[m.group(1)] = calls.get(m.group(1), 0) + 1
    return {name for name, n in calls.items() if uses.get(name) == n + 1}
