"""One LLVM function per distinct kernel: kernels whose code is identical share it.

A deep model repeats its layers: the 128 hidden layers of an MLP training step make 128
copies of the same gemm, bias-gradient and update kernels, which differ only in the
buffers the entry passes them. LLVM optimized and emitted every copy (about 17 ms each),
so its time grew with the depth while the distinct code did not. Kernel `n`'s functions
are `kernel_<n>_<label>` and that name plus a suffix (a gemm's ".gemm.task"); two kernels
are the same when their functions' text is, their own names aside. The later one's
functions are dropped and every reference to them names the first one's instead.
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
        base = bases[number]
        key = "\n".join(chunks[i][2].replace(f'@"{base}', '@"KERNEL') for i in texts[number])
        first = keeper.setdefault(key, number)
        if first != number:
            renamed[number] = (base, bases[first])
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
