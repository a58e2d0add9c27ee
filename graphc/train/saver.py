"""Saver: writes variable values to checkpoint files and restores them (tf.train.Saver).

save() fetches the variables with one Session.run; restore() checks the whole
checkpoint against the saved variables (names, dtypes, shapes) first and then assigns
all of them with one run of the restore op, so a failed restore changes nothing. The
restore op (a placeholder and an Assign per variable, under name scope "save") is
built by the constructor, like TF's, so the graph may be finalized afterwards.

File format: graphc's own (checkpoint_file.py) unless Saver(write_version=
tf.train.SaverDef.V2) asks for TensorFlow's V2 checkpoint (tf_formats/bundle.py);
restore() reads either. save() also writes the graph and its collections
beside the checkpoint, `<prefix>.meta` (graphc's JSON, or TF's MetaGraphDef with V2),
unless write_meta_graph=False; tf.train.import_meta_graph reads it back.
"""
import numbers
import os
import time

from graphc import errors
from graphc.framework.graph import Tensor, warn_at_user
from graphc.ops.constant_ops import placeholder
from graphc.ops.control_flow_ops import group
from graphc.tf_formats import bundle
from graphc.train import checkpoint_file, checkpoint_management, training_util
from graphc.variables import Variable, assign, global_variables

__all__ = ["Saver"]


class CheckpointNotFoundError(errors.NotFoundError, ValueError):
    """A checkpoint that does not exist. TF1's Saver.restore raises ValueError here;
    being also a NotFoundError lets callers catch it as either."""


def _variable_ref(v):
    if isinstance(v, Variable):
        return v._ref()
    if isinstance(v, Tensor) and v.op.type == "VariableV2":
        return v
    raise TypeError(f"Variable to save is not a Variable: {v!r}")


def _named_refs(var_list):
    """{checkpoint name: VariableV2 output} from a list of variables or a {name: var} dict."""
    if isinstance(var_list, dict):
        return {name: _variable_ref(v) for name, v in var_list.items()}
    named = {}
    for v in var_list:
        ref = _variable_ref(v)
        if ref.op.name in named:
            raise ValueError(f"At least two variables have the same name: {ref.op.name}")
        named[ref.op.name] = ref
    return named


def _writes_tf_format(write_version):
    """Saver(write_version=...): None (the default) writes graphc's checkpoint file;
    tf.train.SaverDef.V2 (2) writes TensorFlow's V2 checkpoint (.index + .data), which real
    TF restores. TF's V1 format is not written: V1 asks for TF's format, and V2 is the TF
    format graphc writes (TF reads both), so it gets V2, with a warning."""
    if write_version is None:
        return False
    if write_version == 1:
        warn_at_user("Saver(write_version=SaverDef.V1): graphc does not write TF's V1 "
                     "checkpoint format; writing V2 (.index + .data), which TF restores too")
    elif write_version != 2:
        raise ValueError(f"write_version {write_version!r}: expected tf.train.SaverDef.V1, "
                         "V2 or None (graphc's own checkpoint file)")
    return True


def _shape_str(dims):
    return "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"


class Saver:
    def __init__(self, var_list=None, reshape=False, sharded=False, max_to_keep=5,
                 keep_checkpoint_every_n_hours=10000.0, name=None, restore_sequentially=False,
                 saver_def=None, builder=None, defer_build=False, allow_empty=False,
                 write_version=None, pad_step_number=False, save_relative_paths=False,
                 filename=None):
        if var_list is None:
            var_list = global_variables()
        self._refs = _named_refs(var_list)
        self._write_tf_format = _writes_tf_format(write_version)
        if not self._refs and not allow_empty:
            raise ValueError("No variables to save")
        self._max_to_keep = max_to_keep
        self._keep_every_s = keep_checkpoint_every_n_hours * 3600
        self._next_keep_time = time.time() + self._keep_every_s
        self._pad_step_number = pad_step_number
        self._save_relative_paths = save_relative_paths
        self._filename = filename
        self._last_checkpoints = []   # [(prefix, time saved)], oldest first
        self._to_delete = []
        self._build_restore_op(name)

    def _build_restore_op(self, name):
        self._restore_feeds = {}
        if not self._refs:
            self._restore_op = None
            return
        graph = next(iter(self._refs.values())).graph
        with graph.as_default(), graph.name_scope(name or "save"), \
                graph.control_dependencies(None):
            assigns = []
            for ckpt_name, ref in self._refs.items():
                value = placeholder(ref.dtype, ref.shape, name="restore_value")
                self._restore_feeds[ckpt_name] = value
                assigns.append(assign(ref, value, validate_shape=ref.shape.is_fully_defined(),
                                      name="restore_assign"))
            self._restore_op = group(*assigns, name="restore_all")

    # --------------------------------------------------------------------- save
    def save(self, sess, save_path, global_step=None, latest_filename=None,
             meta_graph_suffix="meta", write_meta_graph=True, write_state=True,
             strip_default_attrs=False, save_debug_info=False):
        """Writes the variables' values to a checkpoint; returns its prefix: save_path,
        or save_path-<global_step>. In a graphc.distribute job of several processes only
        rank 0 writes; the other ranks write nothing (no file, no state file) and return
        the same prefix."""
        from graphc.session import Session
        if not isinstance(sess, Session):
            raise TypeError(f"'sess' must be a Session; {sess}")
        if not self._refs:
            return None
        if latest_filename is not None and os.path.split(latest_filename)[0]:
            raise ValueError("'latest_filename' must not contain path components")
        if global_step is not None:
            if not isinstance(global_step, numbers.Integral):
                global_step = training_util.global_step(sess, global_step)
            fmt = "%s-%08d" if self._pad_step_number else "%s-%d"
            prefix = fmt % (save_path, global_step)
        else:
            prefix = save_path
        from graphc.distribute.world import writes_checkpoints
        if not writes_checkpoints():
            # a graphc.distribute rank other than 0: its variables equal rank 0's, which
            # writes this very checkpoint; N writers of one path would corrupt it
            return prefix
        save_dir = os.path.dirname(save_path)
        if save_dir and not os.path.isdir(save_dir):
            raise ValueError(f"Parent directory of {save_path} doesn't exist, can't save.")
        self._remove_abandoned_files(save_dir, meta_graph_suffix, latest_filename)
        names = list(self._refs)
        values = sess.run([self._refs[n] for n in names])
        write = bundle.write_bundle if self._write_tf_format else checkpoint_file.write_checkpoint
        write(prefix, {n: (v, self._refs[n].dtype) for n, v in zip(names, values)})
        if write_meta_graph:
            self.export_meta_graph(f"{prefix}.{meta_graph_suffix}", graph=sess.graph)
        if write_state:
            self._record_last_checkpoint(prefix)
            checkpoint_management.update_checkpoint_state(
                save_dir, prefix, self.last_checkpoints, latest_filename,
                self._save_relative_paths)
            self._delete_old_checkpoints()
        return prefix

    @staticmethod
    def _remove_abandoned_files(save_dir, meta_graph_suffix, latest_filename):
        """Temporary files of saves killed before their rename (as TF's Saver cleans its
        temp files up): the checkpoint (graphc's, or TF's index and data), meta graph and
        state files' temporary names."""
        state_name = latest_filename or "checkpoint"
        suffixes = (checkpoint_file.SUFFIX, ".index", "." + meta_graph_suffix)
        checkpoint_file.remove_abandoned(
            save_dir, lambda target: target.endswith(suffixes) or ".data-" in target
            or target == state_name)

    def export_meta_graph(self, filename=None, collection_list=None, as_text=False,
                          export_scope=None, clear_devices=False, graph=None, **kwargs):
        """Writes the graph and its collections (the default graph unless given): TF's
        MetaGraphDef for a Saver writing TF's checkpoints, graphc's JSON otherwise."""
        from graphc import graph_io
        from graphc.framework.graph import get_default_graph
        export = graph_io.export_meta_graph if self._write_tf_format else \
            graph_io.export_json_meta_graph
        return export(filename, collection_list=collection_list, as_text=as_text,
                      graph=graph or get_default_graph(), clear_devices=clear_devices)

    def _record_last_checkpoint(self, prefix):
        """Adds prefix as the newest; the ones beyond max_to_keep are queued for deletion
        (after the state file stops listing them)."""
        if not self._max_to_keep:
            return
        self._last_checkpoints = [(p, t) for p, t in self._last_checkpoints if p != prefix]
        self._last_checkpoints.append((prefix, time.time()))
        while len(self._last_checkpoints) > self._max_to_keep:
            self._to_delete.append(self._last_checkpoints.pop(0))

    def _delete_old_checkpoints(self):
        while self._to_delete:
            prefix, saved_at = self._to_delete.pop(0)
            if saved_at > self._next_keep_time:  # one per keep_checkpoint_every_n_hours stays
                self._next_keep_time += self._keep_every_s
                continue
            checkpoint_management.remove_checkpoint(prefix)

    # ------------------------------------------------------------------ restore
    def restore(self, sess, save_path):
        """Assigns every saved variable its value from the checkpoint `save_path`."""
        if not self._refs:
            return
        if save_path is None:
            raise ValueError("Can't load save_path when it is None.")
        if not checkpoint_management.checkpoint_exists(save_path):
            raise CheckpointNotFoundError(
                None, None, f"The passed save_path is not a valid checkpoint: {save_path} "
                            f"(no file {checkpoint_file.checkpoint_path(save_path)} or "
                            f"{bundle.index_path(save_path)})")
        reader = checkpoint_management.open_checkpoint(save_path)
        dtypes_in_file = reader.get_variable_to_dtype_map()
        shapes_in_file = reader.get_variable_to_shape_map()
        for name, ref in self._refs.items():
            if name not in shapes_in_file:
                raise errors.NotFoundError(
                    None, None, "Restoring from checkpoint failed. This is most likely due to a "
                    "Variable name or other graph key that is missing from the checkpoint. "
                    "Please ensure that you have not altered the graph expected based on the "
                    f"checkpoint. Original error:\n\nKey {name} not found in checkpoint "
                    f"{reader.path}")
            if dtypes_in_file[name] != ref.dtype:
                raise errors.InvalidArgumentError(
                    None, None, f"Restoring from checkpoint {reader.path} failed: tensor_name = "
                    f"{name}; expected dtype {ref.dtype.name} does not equal original dtype "
                    f"{dtypes_in_file[name].name}")
            if not ref.shape.is_compatible_with(shapes_in_file[name]):
                raise errors.InvalidArgumentError(
                    None, None, "Restoring from checkpoint failed. This is most likely due to a "
                    "mismatch between the current graph and the graph from the checkpoint. "
                    "Please ensure that you have not altered the graph expected based on the "
                    f"checkpoint. Original error:\n\nAssign requires shapes of both tensors to "
                    f"match. lhs shape= {_shape_str(ref.shape.as_list())} rhs shape= "
                    f"{_shape_str(shapes_in_file[name])} (variable {name})")
        feeds = {self._restore_feeds[n]: reader.get_tensor(n) for n in self._refs}
        sess.run(self._restore_op, feeds)

    # ------------------------------------------------------- checkpoint bookkeeping
    @property
    def last_checkpoints(self):
        """Prefixes of the checkpoints this Saver keeps, oldest first."""
        return [p for p, _ in self._last_checkpoints]

    def set_last_checkpoints(self, last_checkpoints):
        self._last_checkpoints = [(p, time.time()) for p in last_checkpoints]

    def set_last_checkpoints_with_time(self, last_checkpoints_with_time):
        self._last_checkpoints = list(last_checkpoints_with_time)

    def recover_last_checkpoints(self, checkpoint_paths):
        """Adopts the existing ones of checkpoint_paths (e.g. after a restart)."""
        existing = [(p, os.path.getmtime(checkpoint_management.checkpoint_files(p)[0]))
                    for p in checkpoint_paths if checkpoint_management.checkpoint_exists(p)]
        self._last_checkpoints = existing
