"""The standalone runtime: loads and runs compiled graphc files without the compiler.

It imports only numpy and llvmlite (pycuda for GPU files), never graphc or kernels.
The loader arrives with the compiled file format; the Session will execute through it.
"""
