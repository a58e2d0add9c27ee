"""gc.contrib: the tf.contrib names that tutorial scripts use."""
from graphc.contrib import rnn  # noqa: F401
