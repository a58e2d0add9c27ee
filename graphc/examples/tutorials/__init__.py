from graphc.examples.tutorials import mnist  # noqa: F401
