"""tensorflow.python.training (see graphc/python/__init__.py)."""
