"""tensorflow.python.ops (see graphc/python/__init__.py)."""
