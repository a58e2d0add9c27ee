"""tf.io: the names of TF1's tf.io namespace that graphc has (gfile)."""
from graphc import gfile  # noqa: F401
