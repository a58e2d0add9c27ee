"""tensorflow.python.util.compat: tf.compat."""
from graphc.compat import (as_bytes, as_bytes_or_text, as_str, as_str_any,  # noqa: F401
                           as_text, bytes_or_text_types, complex_types, forward_compatible,
                           integral_types, path_to_str, real_types)
