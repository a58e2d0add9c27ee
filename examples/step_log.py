"""The training examples' progress lines: per tenth of a run, the mean loss and training
accuracy of its steps and the time each took."""
import time

import numpy as np


class StepLog:
    def __init__(self, steps):
        self.steps = steps
        self.every = max(1, steps // 10)
        self.recent = []
        self.start = self.interval_start = time.perf_counter()

    def add(self, step, loss, accuracy):
        """Step `step` (from 1) gave this loss and batch accuracy; prints a line at the end
        of each tenth and at the last step."""
        self.recent.append((loss, accuracy))
        if step % self.every == 0 or step == self.steps:
            now = time.perf_counter()
            loss_mean, accuracy_mean = np.mean(self.recent, axis=0)
            per_step = (now - self.interval_start) / len(self.recent)
            print(f"step {step:4d}  loss {loss_mean:.4f}  train accuracy {accuracy_mean:.4f}  "
                  f"{per_step * 1e3:.1f} ms/step")
            self.recent, self.interval_start = [], now

    def elapsed(self):
        """Seconds since the log was made (the training so far)."""
        return time.perf_counter() - self.start
