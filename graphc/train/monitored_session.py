"""MonitoredSession and MonitoredTrainingSession (TF1's tf.train.MonitoredSession family).

A MonitoredSession calls its hooks' begin(), finalizes the graph through a Scaffold (the
init, ready and local-init ops, the summary op and a Saver, found in the graph's
collections or made), creates the Session (restoring the latest checkpoint of
checkpoint_dir, or running the init op), and then wraps each run: the hooks' before_run
fetches and feeds are added to the caller's in one Session.run, their after_run sees the
results, and a hook's request_stop() makes should_stop() true. Leaving its `with` block
calls the hooks' end() and closes the Session; an OutOfRangeError (the end of the input)
ends the block quietly, as in TF1. The graph's queue runners start with the Session and
stop with it (its Coordinator).

graphc runs one process: there are no workers, so is_chief=False is refused, and no
session is re-created after an AbortedError.
"""
from graphc import errors, logging
from graphc.config import RunOptions
from graphc.framework.graph import GraphKeys, get_default_graph
from graphc.ops.control_flow_ops import group
from graphc.train.basic_session_run_hooks import (CheckpointSaverHook, StepCounterHook,
                                                  SummarySaverHook)
from graphc.train.coordinator import Coordinator
from graphc.train.queue_runner import start_queue_runners
from graphc.train.session_run_hook import SessionRunArgs, SessionRunContext, SessionRunValues

__all__ = ["Scaffold", "ChiefSessionCreator", "SessionCreator", "MonitoredSession",
           "SingularMonitoredSession", "MonitoredTrainingSession"]

USE_DEFAULT = object()


class Scaffold:
    """The ops that make and check a training session: init_op, ready_op, local_init_op,
    summary_op and saver; each given, found in its graph collection, or made by
    finalize() as TF1's defaults."""

    def __init__(self, init_op=None, init_feed_dict=None, init_fn=None, ready_op=None,
                 ready_for_local_init_op=None, local_init_op=None, summary_op=None,
                 saver=None, copy_from_scaffold=None):
        if copy_from_scaffold is not None:
            c = copy_from_scaffold
            init_op = init_op or c.init_op
            init_feed_dict = init_feed_dict or c.init_feed_dict
            init_fn = init_fn or c._user_init_fn
            ready_op = ready_op or c.ready_op
            local_init_op = local_init_op or c.local_init_op
            summary_op = summary_op or c.summary_op
            saver = saver or c.saver
        self._init_op, self._init_feed_dict, self._user_init_fn = init_op, init_feed_dict, init_fn
        self._ready_op, self._ready_for_local_init_op = ready_op, ready_for_local_init_op
        self._local_init_op, self._summary_op, self._saver = local_init_op, summary_op, saver

    init_op = property(lambda self: self._init_op)
    init_feed_dict = property(lambda self: self._init_feed_dict)
    ready_op = property(lambda self: self._ready_op)
    ready_for_local_init_op = property(lambda self: self._ready_for_local_init_op)
    local_init_op = property(lambda self: self._local_init_op)
    summary_op = property(lambda self: self._summary_op)
    saver = property(lambda self: self._saver)

    def init_fn(self, session):
        if self._user_init_fn is not None:
            self._user_init_fn(self, session)

    @staticmethod
    def get_or_default(arg_name, collection_key, default_constructor):
        """The one op in collection_key, or default_constructor()'s (then added to it)."""
        found = get_default_graph().get_collection(collection_key)
        if len(found) > 1:
            raise RuntimeError(f"More than one item in collection {collection_key}. Please "
                               f"indicate which one to use by passing it to the tf.Scaffold "
                               f"constructor as: tf.Scaffold({arg_name}=item to use)")
        if found:
            return found[0]
        op = default_constructor()
        if op is not None:
            get_default_graph().add_to_collection(collection_key, op)
        return op

    def finalize(self):
        """Makes the missing ops, then finalizes the graph (no ops may be added after)."""
        from graphc.ops.lookup_ops import tables_initializer
        from graphc.summary import merge_all
        from graphc.train.saver import Saver
        from graphc.variables import (global_variables_initializer,
                                      local_variables_initializer,
                                      report_uninitialized_variables)
        graph = get_default_graph()
        if self._init_op is None:
            self._init_op = Scaffold.get_or_default(
                "init_op", GraphKeys.INIT_OP, lambda: group(global_variables_initializer()))
        if self._ready_op is None:
            self._ready_op = Scaffold.get_or_default(
                "ready_op", GraphKeys.READY_OP, report_uninitialized_variables)
        if self._local_init_op is None:
            self._local_init_op = Scaffold.get_or_default(
                "local_init_op", GraphKeys.LOCAL_INIT_OP,
                lambda: group(local_variables_initializer(), tables_initializer()))
        if self._summary_op is None:
            self._summary_op = Scaffold.get_or_default("summary_op", GraphKeys.SUMMARY_OP,
                                                       merge_all)
        if self._saver is None:
            self._saver = Scaffold.get_or_default(
                "saver", GraphKeys.SAVERS, lambda: Saver(allow_empty=True))
        graph.finalize()
        return self


class SessionCreator:
    def create_session(self):
        raise NotImplementedError


class ChiefSessionCreator(SessionCreator):
    """A Session whose variables come from the latest checkpoint of checkpoint_dir (or
    checkpoint_filename_with_path) when there is one, else from the init op and init_fn."""

    def __init__(self, scaffold=None, master="", config=None, checkpoint_dir=None,
                 checkpoint_filename_with_path=None):
        self._scaffold = scaffold or Scaffold()
        self._config = config
        self._checkpoint_dir = checkpoint_dir
        self._checkpoint_path = checkpoint_filename_with_path

    def create_session(self):
        from graphc.session import Session
        from graphc.train.checkpoint_management import latest_checkpoint
        self._scaffold.finalize()
        sess = Session(config=self._config, graph=get_default_graph())
        path = self._checkpoint_path
        if path is None and self._checkpoint_dir:
            path = latest_checkpoint(self._checkpoint_dir)
        if path:
            self._scaffold.saver.restore(sess, path)
        else:
            sess.run(self._scaffold.init_op, feed_dict=self._scaffold.init_feed_dict)
            self._scaffold.init_fn(sess)
        if self._scaffold.local_init_op is not None:
            sess.run(self._scaffold.local_init_op)
        not_ready = sess.run(self._scaffold.ready_op) if self._scaffold.ready_op is not None \
            else []
        if len(not_ready):
            names = [n.decode() if isinstance(n, bytes) else str(n) for n in not_ready]
            raise RuntimeError(f"Init operations did not make model ready. Uninitialized "
                               f"variables: {names}")
        return sess


class MonitoredSession:
    """A Session run through hooks (see the module docstring)."""

    def __init__(self, session_creator=None, hooks=None, stop_grace_period_secs=120):
        self._hooks = list(hooks or [])
        for hook in self._hooks:
            hook.begin()
        self._stop_grace_period_secs = stop_grace_period_secs
        self._sess = (session_creator or ChiefSessionCreator()).create_session()
        self._coord = Coordinator()
        self._should_stop = False
        self._closed = False
        start_queue_runners(self._sess, self._coord)
        for hook in self._hooks:
            hook.after_create_session(self._sess, self._coord)

    @property
    def graph(self):
        return self._sess.graph

    def _tf_sess(self):
        return self._sess

    def should_stop(self):
        return self._should_stop or self._coord.should_stop() or self._closed

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """The caller's fetches, run with the hooks' in one Session.run."""
        if self.should_stop():
            raise RuntimeError("Run called even after should_stop requested.")
        context = SessionRunContext(SessionRunArgs(fetches, feed_dict), self._sess)
        all_fetches = {"caller": fetches}
        hook_feeds = {}
        for hook in self._hooks:
            request = hook.before_run(context)
            if request is None:
                continue
            if request.fetches is not None:
                all_fetches[hook] = request.fetches
            if request.feed_dict:
                _check_disjoint(hook_feeds, request.feed_dict, "Same tensor is fed by two hooks.")
                hook_feeds.update(request.feed_dict)
        if hook_feeds:
            _check_disjoint(feed_dict or {}, hook_feeds,
                            "Same tensor is fed by a SessionRunHook and user.")
            feed_dict = {**(feed_dict or {}), **hook_feeds}
        options = options or RunOptions()
        outputs = self._sess.run(all_fetches, feed_dict=feed_dict, options=options,
                                 run_metadata=run_metadata)
        for hook in self._hooks:
            hook.after_run(context, SessionRunValues(outputs.get(hook), options, run_metadata))
        self._should_stop = self._should_stop or context.stop_requested
        return outputs["caller"]

    def close(self):
        self._close(None)

    def _close(self, exception_type):
        if self._closed:
            return
        try:
            if exception_type is None:
                for hook in self._hooks:
                    hook.end(self._sess)
        finally:
            self._closed = True
            self._coord.request_stop()
            try:
                self._coord.join(stop_grace_period_secs=self._stop_grace_period_secs)
            finally:
                self._sess.close()

    def __enter__(self):
        return self

    def __exit__(self, exception_type, exception_value, traceback):
        if exception_type is not None and issubclass(exception_type, (errors.OutOfRangeError,
                                                                      StopIteration)):
            exception_type = None
        self._close(exception_type)
        return exception_type is None


def _check_disjoint(a, b, message):
    common = set(a) & set(b)
    if common:
        raise RuntimeError(f"{message} Conflict(s): {sorted(map(str, common))}")


class SingularMonitoredSession(MonitoredSession):
    """A MonitoredSession with a chief's session creator built from these arguments."""

    def __init__(self, hooks=None, scaffold=None, master="", config=None, checkpoint_dir=None,
                 stop_grace_period_secs=120, checkpoint_filename_with_path=None):
        creator = ChiefSessionCreator(scaffold=scaffold, config=config,
                                      checkpoint_dir=checkpoint_dir,
                                      checkpoint_filename_with_path=checkpoint_filename_with_path)
        super().__init__(creator, hooks, stop_grace_period_secs)

    def raw_session(self):
        return self._tf_sess()


def MonitoredTrainingSession(master="", is_chief=True, checkpoint_dir=None,  # noqa: N802
                             scaffold=None, hooks=None, chief_only_hooks=None,
                             save_checkpoint_secs=USE_DEFAULT, save_summaries_steps=USE_DEFAULT,
                             save_summaries_secs=USE_DEFAULT, config=None,
                             stop_grace_period_secs=120, log_step_count_steps=100,
                             max_wait_secs=7200, save_checkpoint_steps=USE_DEFAULT,
                             summary_dir=None):
    """TF1's training session: with checkpoint_dir it restores the latest checkpoint (or
    initializes), saves one every save_checkpoint_secs (600 unless steps are given) and
    summaries every save_summaries_steps (100 unless seconds are given), and logs the
    steps per second every log_step_count_steps."""
    if not is_chief:
        raise NotImplementedError("MonitoredTrainingSession(is_chief=False): graphc runs one "
                                  "process, which is the chief")
    if save_summaries_steps is USE_DEFAULT and save_summaries_secs is USE_DEFAULT:
        save_summaries_steps, save_summaries_secs = 100, None
    else:
        save_summaries_steps = None if save_summaries_steps is USE_DEFAULT else \
            save_summaries_steps
        save_summaries_secs = None if save_summaries_secs is USE_DEFAULT else save_summaries_secs
    if save_checkpoint_secs is USE_DEFAULT and save_checkpoint_steps is USE_DEFAULT:
        save_checkpoint_secs, save_checkpoint_steps = 600, None
    else:
        save_checkpoint_secs = None if save_checkpoint_secs is USE_DEFAULT else \
            save_checkpoint_secs
        save_checkpoint_steps = None if save_checkpoint_steps is USE_DEFAULT else \
            save_checkpoint_steps
    scaffold = scaffold or Scaffold()
    all_hooks = list(chief_only_hooks or [])
    summary_dir = summary_dir or checkpoint_dir
    if summary_dir:
        if log_step_count_steps and log_step_count_steps > 0:
            all_hooks.append(StepCounterHook(output_dir=summary_dir,
                                             every_n_steps=log_step_count_steps))
        if (save_summaries_steps or 0) > 0 or (save_summaries_secs or 0) > 0:
            all_hooks.append(SummarySaverHook(scaffold=scaffold, save_steps=save_summaries_steps,
                                              save_secs=save_summaries_secs,
                                              output_dir=summary_dir))
    if checkpoint_dir and ((save_checkpoint_secs or 0) > 0 or (save_checkpoint_steps or 0) > 0):
        all_hooks.append(CheckpointSaverHook(checkpoint_dir, save_steps=save_checkpoint_steps,
                                             save_secs=save_checkpoint_secs, scaffold=scaffold))
    all_hooks.extend(hooks or [])
    logging.debug("MonitoredTrainingSession hooks: %s", all_hooks)
    creator = ChiefSessionCreator(scaffold=scaffold, config=config,
                                  checkpoint_dir=checkpoint_dir)
    return MonitoredSession(creator, all_hooks, stop_grace_period_secs)
