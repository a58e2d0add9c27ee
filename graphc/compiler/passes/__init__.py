"""The compiler's passes, one per module; graphc/compiler/pipeline.py orders them."""
