"""tf.contrib.framework: arg_scope / add_arg_scope (slim's default-argument scopes).

A function decorated with add_arg_scope takes, for each keyword its call leaves out, the
value the innermost enclosing arg_scope listing that function gives; nested scopes add
to (and override) the outer ones; `with arg_scope(...) as sc` yields a scope that
`arg_scope(sc)` re-enters later.
"""
import contextlib
import functools
import threading

__all__ = ["arg_scope", "add_arg_scope", "has_arg_scope", "arg_scoped_arguments",
           "current_arg_scope"]

_local = threading.local()


def _stack():
    if not hasattr(_local, "stack"):
        _local.stack = [{}]
    return _local.stack


def current_arg_scope():
    return _stack()[-1]


def _key(op):
    return getattr(op, "_key_op", str(op))


def add_arg_scope(func):
    """func, reading its defaults from the enclosing arg_scopes."""
    @functools.wraps(func)
    def func_with_args(*args, **kwargs):
        scoped = current_arg_scope().get(_key(func_with_args))
        if scoped:
            kwargs = {**scoped, **kwargs}
        return func(*args, **kwargs)
    func_with_args._key_op = f"{func.__module__}.{func.__qualname__}"
    func_with_args._arg_scope_target = func
    return func_with_args


def has_arg_scope(func):
    return hasattr(func, "_key_op")


def arg_scoped_arguments(func):
    import inspect
    return list(inspect.signature(func._arg_scope_target).parameters)


@contextlib.contextmanager
def arg_scope(list_ops_or_scope, **kwargs):
    """Sets keyword defaults for the listed add_arg_scope functions inside the block, or
    re-enters a scope (the dict a `with arg_scope(...) as sc` yielded)."""
    if isinstance(list_ops_or_scope, dict):
        if kwargs:
            raise ValueError("When attempting to re-use a scope by suppling a dictionary, "
                             "kwargs must be empty.")
        scope = list_ops_or_scope
    else:
        if not isinstance(list_ops_or_scope, (list, tuple)):
            raise TypeError("list_ops_or_scope must either be a list/tuple or reused scope "
                            "(i.e. dict)")
        scope = {k: dict(v) for k, v in current_arg_scope().items()}
        for op in list_ops_or_scope:
            if not has_arg_scope(op):
                raise ValueError(f"{getattr(op, '__name__', op)} is not decorated with "
                                 "@add_arg_scope")
            scope[_key(op)] = {**scope.get(_key(op), {}), **kwargs}
    _stack().append(scope)
    try:
        yield scope
    finally:
        _stack().pop()
