"""Errors raised by the runtime. The Session maps them to graphc errors:
GuardFailure -> compile again for the new feed shapes; KernelFailure -> gc.errors.<class_name>."""


class RuntimeFailure(Exception):
    """Base class of every error the runtime raises."""


class GuardFailure(RuntimeFailure):
    """The feeds do not satisfy an assumption the code was compiled under (a guard on the
    feed dims, or a feed's rank or a specialized dim); the code must be compiled again."""

    def __init__(self, message, guard=None):
        super().__init__(message)
        self.guard = guard  # the failed guard in the spec's form, or None for a shape mismatch


class NoVariantFits(GuardFailure):
    """No compiled variant of a signature accepts the feeds (runtime/variants.py); the
    Session compiles one more, a loaded file has none to compile."""

    def __init__(self, failures):
        super().__init__("; ".join(failures) if failures else "no compiled variant")
        self.failures = failures  # each variant's GuardFailure message, in the order tried


class FeedError(RuntimeFailure, TypeError):
    """A feed cannot be used at all (wrong count or dtype)."""


class ShapeError(RuntimeFailure, ValueError):
    """The feed dims give impossible sizes (negative, division by zero)."""


class UninitializedVariable(RuntimeFailure):
    """A variable the code reads has no value in the store."""

    def __init__(self, name):
        super().__init__(f"Attempting to use uninitialized value {name}")
        self.name = name


class VariableMismatch(RuntimeFailure, ValueError):
    """A stored variable's dtype or shape differs from what the code was compiled for."""


class KernelFailure(RuntimeFailure):
    """The compiled code reported a run-time error (e.g. an index out of range)."""

    def __init__(self, class_name, message, op_text):
        super().__init__(f"{message}\n\t [[{op_text}]]" if op_text else message)
        self.class_name = class_name  # e.g. "InvalidArgumentError"
        self.message = message
        self.op_text = op_text


class TargetMismatch(RuntimeFailure):
    """The code was built for a CPU this machine is not compatible with."""


class BlasUnavailable(RuntimeFailure):
    """No CBLAS library was found to satisfy the code's BLAS calls."""
