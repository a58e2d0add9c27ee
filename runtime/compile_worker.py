"""The compile worker: optimizes and emits LLVM IR for the process that started it.

runtime/jit.py starts it (`python -m runtime.compile_worker`) once a process has run
jit.IN_PROCESS_COMPILES optimizations itself, because llvmlite's optimization pipeline
leaks native memory per module; a worker is replaced after jit.WORKER_COMPILES modules,
and what it leaked goes with it. Workers also compile the parts of a big module beside
the process (runtime/module_split.py): a part's object code refers to functions of the
others, which only the process that links the parts resolves. Protocol on stdin/stdout: a u64 little-endian length and
a JSON request {"llvm_ir", "target", "speed_level"}; the reply is a u64 length and either
b"\\0" + the object code or b"\\1" + an error message. EOF on stdin ends it.
"""
import json
import signal
import struct
import sys

from runtime import jit


def serve(stdin, stdout):
    while True:
        head = stdin.read(8)
        if len(head) != 8:
            return
        request = json.loads(stdin.read(struct.unpack("<Q", head)[0]))
        try:
            reply = b"\0" + jit.object_code(request["llvm_ir"], request["target"],
                                            request["speed_level"])
        except Exception as e:  # noqa: BLE001 -- the parent compiles again to report it
            reply = b"\1" + f"{type(e).__name__}: {e}".encode()
        stdout.write(struct.pack("<Q", len(reply)) + reply)
        stdout.flush()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent's Ctrl-C is the parent's
    serve(sys.stdin.buffer, sys.stdout.buffer)
