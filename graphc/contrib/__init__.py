"""gc.contrib: the tf.contrib names that TF1 scripts use."""
from graphc.contrib import framework, layers, opt, rnn, slim, training  # noqa: F401
