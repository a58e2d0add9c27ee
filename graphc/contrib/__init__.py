"""gc.contrib: the tf.contrib names that TF1 scripts use."""
from graphc.contrib import framework, layers, opt, rnn, seq2seq, slim, training  # noqa: F401
