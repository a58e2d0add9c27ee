"""gc.contrib: the tf.contrib names that TF1 scripts use."""
from graphc.contrib import (data, framework, layers, learn, lookup, opt, rnn,  # noqa: F401
                            seq2seq, slim, training)
