"""tensorflow.python.platform (see graphc/python/__init__.py)."""
