"""TF1's session configuration messages: ConfigProto, GPUOptions, GraphOptions,
OptimizerOptions, RunOptions, RunMetadata.

They behave as TF's protocol buffers do where scripts notice: nested messages exist from
the start (`config.gpu_options.allow_growth = True`), map fields are dicts
(`device_count={"GPU": 0}`), an unknown keyword is a ValueError and an unknown attribute
an AttributeError.

What each field does in graphc (the Session reads them; see Session.__init__ and run):
  honoured     allow_soft_placement (graphc's default is True: TF's False fails on a
               /gpu:0 placement without a GPU, graphc warns and runs it on the CPU),
               intra_op_parallelism_threads (threads of the compiled loops),
               device_count["GPU"] = 0 (ops placed on a GPU run on the CPU),
               log_device_placement (prints each op's device the first time a run
               needs it, as TF1's placer does),
               backend (graphc's own: "compiled", "reference", "gpu", "gpu_emulated").
  no effect,   gpu_options.allow_growth / per_process_gpu_memory_fraction / allocator_type
  same results (graphc allocates one arena per run signature), inter_op_parallelism_threads
               and use_per_session_threads (one executor runs a signature),
               graph_options.optimizer_options (opt_level, global_jit_level:
               graphc always compiles and runs its own passes; GRAPHC_DISABLE_PASSES
               switches them), graph_options.* otherwise, placement_period,
               isolate_session_state, RunOptions.report_tensor_allocations_upon_oom,
               output_partition_graphs.
  not done,    device_count["CPU"] > 1 and gpu_options.visible_device_list other than "0"
  warns        (graphc drives one CPU device and GPU 0), operation_timeout_in_ms (it bounds
               only a queue's enqueue/dequeue waits, with DeadlineExceededError) and
               RunOptions.timeout_in_ms (runs are not cancelled), RunOptions.trace_level
               (RunMetadata stays empty), device_filters, cluster_def.
"""
import copy


class _Message:
    """A protobuf-like message: a fixed set of fields, each with a default. A default that
    is a _Message subclass makes a nested message; a dict or list default a map or
    repeated field (both kept as the Python container, as protobuf lets scripts mutate)."""
    _FIELDS = {}

    def __init__(self, **fields):
        for name, default in self._FIELDS.items():
            value = default() if isinstance(default, type) else copy.copy(default)
            object.__setattr__(self, name, value)
        for name, value in fields.items():
            if name not in self._FIELDS:
                raise ValueError(f'Protocol message {type(self).__name__} has no "{name}" '
                                 "field.")
            self._set(name, value)

    def _set(self, name, value):
        default = self._FIELDS[name]
        if isinstance(default, type):
            if isinstance(value, dict):
                value = default(**value)
            elif not isinstance(value, default):
                raise TypeError(f"Parameter to MergeFrom() must be instance of same class: "
                                f"expected {default.__name__} got {type(value).__name__}.")
            value = copy.deepcopy(value)
        elif isinstance(default, (dict, list)):
            value = type(default)(value)
        object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        if name not in self._FIELDS:
            raise AttributeError(f'Assignment not allowed (no field "{name}" in protocol '
                                 "message object).")
        if isinstance(self._FIELDS[name], (type, dict, list)):
            raise AttributeError(f'Assignment not allowed to field "{name}" in protocol '
                                 "message object.")
        object.__setattr__(self, name, value)

    def CopyFrom(self, other):  # noqa: N802 - protobuf's name
        for name in self._FIELDS:
            object.__setattr__(self, name, copy.deepcopy(getattr(other, name)))

    def __eq__(self, other):
        return type(self) is type(other) and all(
            getattr(self, n) == getattr(other, n) for n in self._FIELDS)

    def __repr__(self):
        changed = [f"{n}={getattr(self, n)!r}" for n, d in self._FIELDS.items()
                   if getattr(self, n) != (d() if isinstance(d, type) else d)]
        return f"{type(self).__name__}({', '.join(changed)})"


class GPUOptions(_Message):
    _FIELDS = {"per_process_gpu_memory_fraction": 0.0, "allow_growth": False,
               "allocator_type": "", "deferred_deletion_bytes": 0, "visible_device_list": "",
               "polling_active_delay_usecs": 0, "polling_inactive_delay_msecs": 0,
               "force_gpu_compatible": False}


class OptimizerOptions(_Message):
    L1, L0 = 0, -1  # Level
    DEFAULT, OFF, ON_1, ON_2 = 0, -1, 1, 2  # GlobalJitLevel
    _FIELDS = {"do_common_subexpression_elimination": False, "do_constant_folding": False,
               "max_folded_constant_in_bytes": 0, "do_function_inlining": False,
               "opt_level": 0, "global_jit_level": 0, "cpu_global_jit": False}


class GraphOptions(_Message):
    _FIELDS = {"enable_recv_scheduling": False, "optimizer_options": OptimizerOptions,
               "build_cost_model": 0, "build_cost_model_after": 0, "infer_shapes": False,
               "place_pruned_graph": False, "enable_bfloat16_sendrecv": False,
               "timeline_step": 0}


class ConfigProto(_Message):
    _FIELDS = {"device_count": {}, "intra_op_parallelism_threads": 0,
               "inter_op_parallelism_threads": 0, "use_per_session_threads": False,
               "placement_period": 0, "device_filters": [], "gpu_options": GPUOptions,
               "allow_soft_placement": True, "log_device_placement": False,
               "graph_options": GraphOptions, "operation_timeout_in_ms": 0,
               "isolate_session_state": False, "cluster_def": None,
               "share_cluster_devices_in_session": False,
               "backend": None}  # graphc's own: which executor runs the Session

    def unsupported(self):
        """What this config asks for that graphc does not do, one line each."""
        notes = []
        if self.device_count.get("CPU", 1) > 1:
            notes.append(f"device_count={{'CPU': {self.device_count['CPU']}}}: graphc has one "
                         "CPU device")
        if self.gpu_options.visible_device_list not in ("", "0"):
            notes.append(f"gpu_options.visible_device_list="
                         f"{self.gpu_options.visible_device_list!r}: graphc drives GPU 0 only")
        if self.operation_timeout_in_ms > 0:
            notes.append("operation_timeout_in_ms except in queue waits: runs are not "
                         "cancelled")
        if self.device_filters:
            notes.append("device_filters: graphc has no remote devices")
        if self.cluster_def is not None:
            notes.append("cluster_def: graphc runs in one process")
        return notes

    def gpus_allowed(self):
        """graphc's: False when device_count={"GPU": 0} hides the GPU."""
        return self.device_count.get("GPU", 1) != 0


class RunOptions(_Message):
    NO_TRACE, SOFTWARE_TRACE, HARDWARE_TRACE, FULL_TRACE = 0, 1, 2, 3  # TraceLevel
    _FIELDS = {"trace_level": 0, "timeout_in_ms": 0, "inter_op_thread_pool": 0,
               "output_partition_graphs": False, "report_tensor_allocations_upon_oom": False}

    def unsupported(self):
        notes = []
        if self.trace_level != RunOptions.NO_TRACE:
            notes.append("RunOptions.trace_level: graphc collects no step stats (RunMetadata "
                         "stays empty)")
        if self.timeout_in_ms > 0:
            notes.append("RunOptions.timeout_in_ms: runs are not cancelled")
        return notes


class RunMetadata(_Message):
    _FIELDS = {"step_stats": None, "cost_graph": None, "partition_graphs": [],
               "function_graphs": []}
