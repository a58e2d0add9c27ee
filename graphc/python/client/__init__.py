"""tensorflow.python.client (see graphc/python/__init__.py)."""
