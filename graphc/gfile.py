"""tf.gfile (and tf.io.gfile's lower-case names): TF1's file API on the local file system.

Failures raise tf.errors (NotFoundError, AlreadyExistsError, PermissionDeniedError,
FailedPreconditionError, UnknownError) naming the call and the path, as TF1's do, never a
bare OSError. GFile reads and writes bytes underneath: in text mode read() returns str
(UTF-8) without newline translation, write() takes str or bytes in any mode, as TF1's.
"""
import contextlib
import glob as _glob
import os
import shutil
from typing import NamedTuple

from graphc import errors

_ERROR_OF = [(FileNotFoundError, errors.NotFoundError),
             (FileExistsError, errors.AlreadyExistsError),
             (PermissionError, errors.PermissionDeniedError),
             (NotADirectoryError, errors.FailedPreconditionError),
             (IsADirectoryError, errors.FailedPreconditionError)]


@contextlib.contextmanager
def _as_tf_errors(call, path):
    try:
        yield
    except OSError as e:
        cls = next((c for os_cls, c in _ERROR_OF if isinstance(e, os_cls)), errors.UnknownError)
        raise cls(None, None, f"{call}({path!r}): {e.strerror or e}") from None


def _path(name):
    return os.fsdecode(os.fspath(name))


class GFile:
    """A file, as TF1's tf.gfile.GFile(name, mode): modes r, w, a with optional b and +."""

    def __init__(self, name, mode="r"):
        if not mode or mode[0] not in "rwa" or set(mode[1:]) - set("b+"):
            raise errors.InvalidArgumentError(
                None, None, f"GFile({name!r}): mode must be r, w or a (with b or +), "
                            f"got {mode!r}")
        self.name = _path(name)
        self.mode = mode
        self._binary = "b" in mode
        with _as_tf_errors("GFile", self.name):
            self._file = open(self.name, mode.replace("b", "") + "b")

    def _decoded(self, data):
        return data if self._binary else data.decode("utf-8")

    def read(self, n=-1):
        with _as_tf_errors("GFile.read", self.name):
            return self._decoded(self._file.read(n))

    def readline(self):
        return self._decoded(self._file.readline())

    def readlines(self):
        return [self._decoded(line) for line in self._file.readlines()]

    def __iter__(self):
        return self

    def __next__(self):
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def write(self, file_content):
        if isinstance(file_content, str):
            file_content = file_content.encode("utf-8")
        with _as_tf_errors("GFile.write", self.name):
            self._file.write(file_content)

    def seek(self, offset=None, whence=0, position=None):
        if position is not None:
            offset = position
        return self._file.seek(offset, whence)

    def tell(self):
        return self._file.tell()

    def size(self):
        return os.fstat(self._file.fileno()).st_size

    def flush(self):
        self._file.flush()

    def close(self):
        self._file.close()

    @property
    def closed(self):
        return self._file.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


FastGFile = GFile
Open = GFile


class FileStatistics(NamedTuple):
    length: int
    mtime_nsec: int
    is_directory: bool


def Exists(filename):  # noqa: N802 - TF1's names
    return os.path.exists(_path(filename))


def IsDirectory(dirname):  # noqa: N802
    return os.path.isdir(_path(dirname))


def Glob(filename):  # noqa: N802
    """The paths matching a pattern (or each pattern of a list), in sorted order."""
    patterns = [filename] if isinstance(filename, (str, bytes, os.PathLike)) else filename
    return sorted(p for pattern in patterns for p in _glob.glob(_path(pattern)))


def ListDirectory(dirname):  # noqa: N802
    """The names of a directory's entries (not paths; no "." or "..")."""
    dirname = _path(dirname)
    if not os.path.isdir(dirname):
        raise errors.NotFoundError(None, None, f"ListDirectory({dirname!r}): could not find "
                                               "directory")
    with _as_tf_errors("ListDirectory", dirname):
        return sorted(os.listdir(dirname))


def MkDir(dirname):  # noqa: N802
    """Creates one directory; its parent must exist, and it must not."""
    dirname = _path(dirname)
    with _as_tf_errors("MkDir", dirname):
        os.mkdir(dirname)


def MakeDirs(dirname):  # noqa: N802
    """Creates a directory and its missing parents; nothing if it exists."""
    dirname = _path(dirname)
    with _as_tf_errors("MakeDirs", dirname):
        os.makedirs(dirname, exist_ok=True)


def Remove(filename):  # noqa: N802
    filename = _path(filename)
    with _as_tf_errors("Remove", filename):
        os.remove(filename)


def DeleteRecursively(dirname):  # noqa: N802
    dirname = _path(dirname)
    if not os.path.exists(dirname):
        raise errors.NotFoundError(None, None, f"DeleteRecursively({dirname!r}): no such file "
                                               "or directory")
    with _as_tf_errors("DeleteRecursively", dirname):
        if os.path.isdir(dirname) and not os.path.islink(dirname):
            shutil.rmtree(dirname)
        else:
            os.remove(dirname)


def _check_target(call, newpath, overwrite):
    if not overwrite and os.path.exists(newpath):
        raise errors.AlreadyExistsError(None, None, f"{call}: {newpath!r} exists (pass "
                                                    "overwrite=True to replace it)")


def Rename(oldname, newname, overwrite=False):  # noqa: N802
    oldname, newname = _path(oldname), _path(newname)
    _check_target("Rename", newname, overwrite)
    with _as_tf_errors("Rename", oldname):
        os.replace(oldname, newname)


def Copy(oldpath, newpath, overwrite=False):  # noqa: N802
    oldpath, newpath = _path(oldpath), _path(newpath)
    _check_target("Copy", newpath, overwrite)
    with _as_tf_errors("Copy", oldpath):
        shutil.copyfile(oldpath, newpath)


def Stat(filename):  # noqa: N802
    filename = _path(filename)
    with _as_tf_errors("Stat", filename):
        st = os.stat(filename)
    return FileStatistics(st.st_size, st.st_mtime_ns, os.path.isdir(filename))


def Walk(top, in_order=True):  # noqa: N802
    """(dirname, subdir names, file names) for top and each directory below it: parents
    before children when in_order, else children first. Nothing when top does not exist."""
    top = _path(top)
    for dirname, subdirs, files in os.walk(top, topdown=in_order):
        subdirs.sort()  # in place: a top-down walk descends in this order
        yield dirname, list(subdirs), sorted(files)


# tf.io.gfile's names for the same functions (TF 1.13+ and TF2)
exists, isdir, glob, listdir, mkdir, makedirs = (Exists, IsDirectory, Glob, ListDirectory,
                                                 MkDir, MakeDirs)
remove, rename, copy, rmtree, stat, walk = Remove, Rename, Copy, DeleteRecursively, Stat, Walk
