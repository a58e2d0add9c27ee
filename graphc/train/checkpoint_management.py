"""The "checkpoint" state file of a directory: which checkpoint is the latest.

Same text format as TF1, one quoted (JSON-escaped) path per line:

    model_checkpoint_path: "model.ckpt-300"
    all_model_checkpoint_paths: "model.ckpt-200"
    all_model_checkpoint_paths: "model.ckpt-300"

Relative paths are relative to the directory holding the file.
"""
import json
import os

from graphc import errors
from graphc.tf_formats import bundle
from graphc.train import checkpoint_file

__all__ = ["CheckpointState", "get_checkpoint_state", "update_checkpoint_state",
           "latest_checkpoint", "checkpoint_exists", "remove_checkpoint", "list_variables",
           "load_variable", "load_checkpoint", "NewCheckpointReader"]

_DEFAULT_STATE_FILE = "checkpoint"


class CheckpointState:
    def __init__(self, model_checkpoint_path="", all_model_checkpoint_paths=()):
        self.model_checkpoint_path = model_checkpoint_path
        self.all_model_checkpoint_paths = list(all_model_checkpoint_paths)

    def __repr__(self):
        return (f"CheckpointState(model_checkpoint_path={self.model_checkpoint_path!r}, "
                f"all_model_checkpoint_paths={self.all_model_checkpoint_paths!r})")


def _state_path(checkpoint_dir, latest_filename):
    return os.path.join(checkpoint_dir, latest_filename or _DEFAULT_STATE_FILE)


def _relative_to(path, directory, relative):
    if relative and os.path.isabs(path):
        return os.path.relpath(path, directory or ".")
    if not os.path.isabs(path) and not os.path.isabs(directory or "."):
        return os.path.relpath(path, directory or ".")
    return path


def update_checkpoint_state(save_dir, model_checkpoint_path, all_model_checkpoint_paths=None,
                            latest_filename=None, save_relative_paths=False):
    """Writes the state file of save_dir (atomically); model_checkpoint_path is the latest
    and is appended to all_model_checkpoint_paths if it is not already last."""
    paths = list(all_model_checkpoint_paths or [])
    if not paths or paths[-1] != model_checkpoint_path:
        paths.append(model_checkpoint_path)
    lines = [f"model_checkpoint_path: "
             f"{json.dumps(_relative_to(model_checkpoint_path, save_dir, save_relative_paths))}"]
    lines += [f"all_model_checkpoint_paths: "
              f"{json.dumps(_relative_to(p, save_dir, save_relative_paths))}" for p in paths]
    path = _state_path(save_dir, latest_filename)
    text = ("\n".join(lines) + "\n").encode("utf-8")
    checkpoint_file.write_atomically(path, lambda f: f.write(text))


def get_checkpoint_state(checkpoint_dir, latest_filename=None):
    """The CheckpointState of checkpoint_dir, or None if it has no state file."""
    path = _state_path(checkpoint_dir, latest_filename)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    state = CheckpointState()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, _, value = line.partition(":")
        try:
            value = json.loads(value.strip())
        except ValueError:
            value = None
        if key.strip() not in ("model_checkpoint_path", "all_model_checkpoint_paths") or \
                not isinstance(value, str):
            raise errors.DataLossError(None, None, f"Unable to parse checkpoint state file "
                                                   f"{path}, line {n}: {line!r}")
        if not os.path.isabs(value):
            value = os.path.join(checkpoint_dir, value)
        if key.strip() == "model_checkpoint_path":
            state.model_checkpoint_path = value
        else:
            state.all_model_checkpoint_paths.append(value)
    if not state.model_checkpoint_path:
        raise errors.DataLossError(None, None, f"Invalid checkpoint state loaded from {path}: "
                                               "no model_checkpoint_path")
    return state


def checkpoint_files(checkpoint_prefix):
    """The files of the checkpoint `checkpoint_prefix` that exist: graphc's one file, or a
    TF checkpoint's .index and .data-* (the index first)."""
    own = checkpoint_file.checkpoint_path(checkpoint_prefix)
    if os.path.isfile(own):
        return [own]
    if not bundle.is_bundle(checkpoint_prefix):
        return []
    directory, base = os.path.split(checkpoint_prefix)
    data = sorted(f for f in os.listdir(directory or ".") if f.startswith(base + ".data-"))
    return [bundle.index_path(checkpoint_prefix)] + [os.path.join(directory, f) for f in data]


def checkpoint_exists(checkpoint_prefix):
    return bool(checkpoint_files(checkpoint_prefix))


def open_checkpoint(checkpoint_prefix):
    """A reader of the checkpoint `checkpoint_prefix`, in whichever format it was written:
    graphc's (<prefix>.gcckpt) or TensorFlow's V2 (<prefix>.index + <prefix>.data-*)."""
    if os.path.isfile(checkpoint_file.checkpoint_path(checkpoint_prefix)):
        return checkpoint_file.CheckpointReader(checkpoint_prefix)
    if bundle.is_bundle(checkpoint_prefix):
        return bundle.BundleReader(checkpoint_prefix)
    if checkpoint_prefix.endswith(bundle.INDEX_SUFFIX) or ".data-" in checkpoint_prefix:
        raise errors.NotFoundError(
            None, None, f"{checkpoint_prefix} is a file of a TF checkpoint; pass its prefix "
                        f"(the path without .index / .data-*)")
    raise errors.NotFoundError(
        None, None, f"Unsuccessful TensorSliceReader constructor: Failed to find any matching "
                    f"files for {checkpoint_prefix} (neither {checkpoint_prefix}"
                    f"{checkpoint_file.SUFFIX} nor {bundle.index_path(checkpoint_prefix)})")


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """The prefix of the newest checkpoint listed in checkpoint_dir's state file, or None
    (no state file, or the checkpoint it names is gone)."""
    state = get_checkpoint_state(checkpoint_dir, latest_filename)
    if state and checkpoint_exists(state.model_checkpoint_path):
        return state.model_checkpoint_path
    return None


def remove_checkpoint(checkpoint_prefix, checkpoint_format_version=None, meta_graph_suffix="meta"):
    """Deletes a checkpoint's files and its meta graph (if any)."""
    for path in checkpoint_files(checkpoint_prefix) + [f"{checkpoint_prefix}.{meta_graph_suffix}"]:
        if os.path.exists(path):
            os.remove(path)


def NewCheckpointReader(filepattern):  # noqa: N802 - TF's name
    return open_checkpoint(filepattern)


def _reader_for(ckpt_dir_or_file):
    if os.path.isdir(ckpt_dir_or_file):
        prefix = latest_checkpoint(ckpt_dir_or_file)
        if prefix is None:
            raise ValueError(f"Couldn't find 'checkpoint' file or checkpoints in given "
                             f"directory {ckpt_dir_or_file}")
        ckpt_dir_or_file = prefix
    return open_checkpoint(ckpt_dir_or_file)


def load_checkpoint(ckpt_dir_or_file):
    """A reader of a checkpoint (or of a directory's latest one): get_tensor,
    get_variable_to_shape_map, get_variable_to_dtype_map, has_tensor."""
    return _reader_for(ckpt_dir_or_file)


def list_variables(ckpt_dir_or_file):
    """[(name, shape)] of the variables in a checkpoint (or a directory's latest one)."""
    shapes = _reader_for(ckpt_dir_or_file).get_variable_to_shape_map()
    return sorted(shapes.items())


def load_variable(ckpt_dir_or_file, name):
    """The value of one variable from a checkpoint, as a NumPy array."""
    if name.endswith(":0"):
        name = name[:-2]
    return _reader_for(ckpt_dir_or_file).get_tensor(name)
