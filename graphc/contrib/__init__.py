"""gc.contrib: the tf.contrib names that TF1 scripts use."""
from graphc.contrib import (framework, layers, lookup, opt, rnn, seq2seq, slim,  # noqa: F401
                            training)
