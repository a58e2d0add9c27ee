"""gc.contrib: the tf.contrib names that tutorial scripts use."""
from graphc.contrib import rnn, seq2seq  # noqa: F401
