"""tf.strings: TF1's string ops under their tf.strings names (graphc/ops/string_ops.py)."""
from graphc.ops.string_ops import (as_string, length, lower, reduce_join,  # noqa: F401
                                   regex_full_match, regex_replace, split, strip, substr,
                                   to_hash_bucket_fast, to_number, upper)
from graphc.ops.string_ops import string_join as join  # noqa: F401
