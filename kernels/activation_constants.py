"""Constants that define activations, read by their scalar emitters (scalar_ops) and by
graphc's NumPy reference kernels (graphc/ops/nn_ops.py): one definition for both. Plain
numbers, so importing them loads no LLVM."""

# SELU (Klambauer et al. 2017, "Self-Normalizing Neural Networks"), as TF's
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
