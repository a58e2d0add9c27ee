"""The device buffers of one run's values whose rows are a loop's trip count (the spec's
"grown", docs/gpu_contract.md): the stacks a While without a bound on its trip count
keeps for its gradient, the arrays it appends to, and what kernels after it compute of
them. Nothing planned before the run knows their size, so the runtime owns them, one
buffer per entry of "grown":

- the While grows its stacks row by row: before the body's launches of iteration k it
  makes room for row k, doubling the rows (first_rows the first time) into a new buffer
  and copying the k rows written on the device, so that a run of n trips allocates
  log2(n / first_rows) times and copies fewer than 2n rows, never through the host;
- any other is allocated at its first use (a launch's argument, a loop's input), when
  the loops whose trip counts size it have run (their run dims set), at the biggest size
  of the values the memory plan put in it (kept contents when it grows past a stack);
- all are freed when the run ends, failing or not (free).
"""
from ..errors import ShapeError
from ..shapes import evaluate as _evaluate

__all__ = ["GrownBuffers"]


class GrownBuffers:
    """One run's grown buffers; env: the run's dim values, to which each loop adds its
    trip count when it leaves (Run.set_run_dim)."""

    __slots__ = ("device", "entries", "env", "pointers", "capacity", "sized")

    def __init__(self, device, entries, env):
        self.device, self.entries, self.env = device, entries, env
        self.pointers = [None] * len(entries)
        self.capacity = [0] * len(entries)  # bytes
        self.sized = [False] * len(entries)  # its size known: the loops sizing it ran

    def row(self, g, k, row_bytes):
        """The device address of row k of buffer g (a stack a loop is writing), after
        making room for it."""
        # rows of 0 bytes (an empty element) have room for any k in the first buffer
        room = self.capacity[g] // row_bytes if row_bytes else \
            (0 if self.pointers[g] is None else k + 1)
        if k >= room:
            rows = self.entries[g]["first_rows"] if room == 0 else 2 * room
            self._reserve(g, rows * row_bytes, k * row_bytes)
        return self.pointers[g] + k * row_bytes

    def address(self, g):
        """The device address of buffer g, sized for every value in it (the first time)."""
        if not self.sized[g]:
            try:
                nbytes = max(_evaluate(b, self.env) for b in self.entries[g]["bytes"])
            except KeyError as e:
                raise ShapeError(f"grown buffer {g} is used before the loop whose trip "
                                 f"count {e.args[0]!r} sizes it has run") from None
            if nbytes < 0:
                raise ShapeError(f"grown buffer {g}: its values' sizes evaluate to the "
                                 f"negative {nbytes} bytes")
            if nbytes > self.capacity[g] or self.pointers[g] is None:
                self._reserve(g, nbytes, self.capacity[g])
            self.sized[g] = True
        return self.pointers[g]

    def _reserve(self, g, nbytes, keep):
        """Buffer g with room for nbytes, its first `keep` bytes copied on the device."""
        device = self.device
        new = device.alloc(max(nbytes, 1))
        old = self.pointers[g]
        if old is not None:
            if keep:
                device.copy(new, old, min(keep, nbytes))
            device.free(old)
        self.pointers[g] = new
        self.capacity[g] = nbytes

    def free(self):
        for g, address in enumerate(self.pointers):
            if address is not None:
                self.device.free(address)
                self.pointers[g] = None
                self.capacity[g] = 0
