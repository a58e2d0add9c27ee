"""Error classes of tf.errors; run-time errors name the op and where it was created."""


class OpError(Exception):
    """A failure while running an op. `op` is the Operation (or None)."""

    def __init__(self, node_def, op, message):
        super().__init__(message)
        self.node_def = node_def
        self.op = op
        self.message = message


class CancelledError(OpError):
    pass


class InvalidArgumentError(OpError):
    pass


class NotFoundError(OpError):
    pass


class FailedPreconditionError(OpError):
    pass


class OutOfRangeError(OpError):
    pass


class UnimplementedError(OpError):
    pass


class InternalError(OpError):
    pass


class ResourceExhaustedError(OpError):
    pass


class DeadlineExceededError(OpError):
    pass


class AlreadyExistsError(OpError):
    pass


class PermissionDeniedError(OpError):
    pass


class UnknownError(OpError):
    pass


class DataLossError(OpError):
    """Unrecoverable data loss or corruption (e.g. a damaged checkpoint file)."""


class KernelError(Exception):
    """Raised by a reference kernel; the executor re-raises it as `cls` naming the op."""

    def __init__(self, message, cls=InvalidArgumentError):
        super().__init__(message)
        self.cls = cls


def op_error(op, message, cls=InvalidArgumentError):
    """The error of `op` failing with `message`, naming the node and where it was created."""
    return cls(None, op, f"{message}\n\t [[node {op.describe()}]]")
