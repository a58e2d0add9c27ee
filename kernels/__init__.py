"""How each op computes natively: scalar emitters and loop templates for codegen.

Imports only llvmlite and numpy, never graphc or runtime. Filled by the compiler issue.
"""
