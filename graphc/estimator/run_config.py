"""tf.estimator.RunConfig: where an Estimator keeps its files and how often it saves.

graphc runs one process, so the cluster fields are those of TF1's local (non-distributed)
run: one chief worker, no parameter servers."""
__all__ = ["RunConfig"]

_USE_DEFAULT = object()
_DEFAULT_SAVE_CHECKPOINTS_SECS = 600

_REPLACEABLE = ("model_dir", "tf_random_seed", "save_summary_steps", "save_checkpoints_steps",
                "save_checkpoints_secs", "session_config", "keep_checkpoint_max",
                "keep_checkpoint_every_n_hours", "log_step_count_steps", "train_distribute",
                "device_fn", "protocol", "eval_distribute", "experimental_distribute",
                "experimental_max_worker_delay_secs", "session_creation_timeout_secs")


class RunConfig:
    """Checkpoints every save_checkpoints_secs (600 when neither it nor
    save_checkpoints_steps is given), summaries every save_summary_steps, the loss and
    steps/sec logged every log_step_count_steps."""

    def __init__(self, model_dir=None, tf_random_seed=None, save_summary_steps=100,
                 save_checkpoints_steps=_USE_DEFAULT, save_checkpoints_secs=_USE_DEFAULT,
                 session_config=None, keep_checkpoint_max=5,
                 keep_checkpoint_every_n_hours=10000, log_step_count_steps=100,
                 train_distribute=None, device_fn=None, protocol=None, eval_distribute=None,
                 experimental_distribute=None, experimental_max_worker_delay_secs=None,
                 session_creation_timeout_secs=7200):
        steps_given = save_checkpoints_steps is not _USE_DEFAULT
        secs_given = save_checkpoints_secs is not _USE_DEFAULT
        if steps_given and secs_given and save_checkpoints_steps is not None \
                and save_checkpoints_secs is not None:
            raise ValueError("RunConfig: can not provide both save_checkpoints_steps and "
                             "save_checkpoints_secs.")
        if not steps_given and not secs_given:
            save_checkpoints_steps, save_checkpoints_secs = None, \
                _DEFAULT_SAVE_CHECKPOINTS_SECS
        else:
            save_checkpoints_steps = save_checkpoints_steps if steps_given else None
            save_checkpoints_secs = save_checkpoints_secs if secs_given else None
        for name in ("train_distribute", "eval_distribute", "experimental_distribute"):
            if locals()[name] is not None:
                raise NotImplementedError(f"RunConfig({name}=...): graphc runs one process "
                                          f"on one device; distribution strategies are not "
                                          f"supported by its Estimator")
        self._values = {name: value for name, value in locals().items()
                        if name in _REPLACEABLE}

    def replace(self, **kwargs):
        """A copy with these fields replaced (only the constructor's fields can be)."""
        for name in kwargs:
            if name not in _REPLACEABLE:
                raise ValueError(f"RunConfig.replace: {name} is not allowed to be replaced.")
        values = dict(self._values)
        if "save_checkpoints_steps" in kwargs and "save_checkpoints_secs" not in kwargs:
            values["save_checkpoints_secs"] = None
        if "save_checkpoints_secs" in kwargs and "save_checkpoints_steps" not in kwargs:
            values["save_checkpoints_steps"] = None
        values.update(kwargs)
        return RunConfig(**values)

    def __getattr__(self, name):
        values = self.__dict__.get("_values", {})
        if name in values:
            return values[name]
        raise AttributeError(f"'RunConfig' object has no attribute {name!r}")

    # the single local process of TF1's RunConfig without TF_CONFIG
    cluster_spec = property(lambda self: None)
    is_chief = property(lambda self: True)
    master = property(lambda self: "")
    evaluation_master = property(lambda self: "")
    num_ps_replicas = property(lambda self: 0)
    num_worker_replicas = property(lambda self: 1)
    task_type = property(lambda self: "worker")
    task_id = property(lambda self: 0)
    global_id_in_cluster = property(lambda self: 0)
    service = property(lambda self: None)

    def __repr__(self):
        return "RunConfig(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"
