"""tensorflow.python.platform.gfile: tf.gfile."""
from graphc.gfile import (Copy, DeleteRecursively, Exists, FastGFile, FileStatistics,  # noqa: F401
                          GFile, Glob, IsDirectory, ListDirectory, MakeDirs, MkDir, Open,
                          Remove, Rename, Stat, Walk)
