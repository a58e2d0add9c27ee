"""tensorflow.python.util (see graphc/python/__init__.py)."""
