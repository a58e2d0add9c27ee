"""gc.contrib: the tf.contrib names that TF1 scripts use."""
from graphc.contrib import (framework, layers, learn, opt, rnn, seq2seq, slim,  # noqa: F401
                            training)
