from graphc.examples.tutorials.mnist import input_data  # noqa: F401
