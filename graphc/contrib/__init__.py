"""gc.contrib: the tf.contrib names that TF1 scripts use."""
from graphc.contrib import (data, framework, layers, learn, opt, rnn, seq2seq,  # noqa: F401
                            slim, training)
