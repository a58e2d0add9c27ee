"""TensorFlow's internal module paths that TF1 scripts import directly
(`from tensorflow.python.ops import control_flow_ops`, `from tensorflow.python.platform
import gfile`, ...). TF never made them public API, but TF1-era code uses them for public
names; each module here re-exports the graphc modules that own those names, so the names
mean what they mean at tf.*. Only the modules the corpus of tools/tf1_coverage.py imports
are here."""
