"""tensorflow.python.framework (see graphc/python/__init__.py)."""
