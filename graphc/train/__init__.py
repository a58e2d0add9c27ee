"""gc.train: optimizers, the global step, learning-rate schedules, Saver and checkpoints."""
from graphc.train.optimizer import *  # noqa: F401,F403
from graphc.train.gradient_descent import *  # noqa: F401,F403
from graphc.train.momentum import *  # noqa: F401,F403
from graphc.train.adam import *  # noqa: F401,F403
from graphc.train.rmsprop import *  # noqa: F401,F403
from graphc.train.adagrad import *  # noqa: F401,F403
from graphc.train.adadelta import *  # noqa: F401,F403
from graphc.train.ftrl import *  # noqa: F401,F403
from graphc.train.moving_averages import ExponentialMovingAverage  # noqa: F401
from graphc.train.coordinator import Coordinator, LooperThread  # noqa: F401
from graphc.train.queue_runner import *  # noqa: F401,F403
from graphc.train.input import *  # noqa: F401,F403
from graphc.ops.queue_ops import FIFOQueue, PaddingFIFOQueue, RandomShuffleQueue  # noqa: F401
from graphc.train.session_run_hook import *  # noqa: F401,F403
from graphc.train.basic_session_run_hooks import *  # noqa: F401,F403
from graphc.train.monitored_session import *  # noqa: F401,F403
from graphc.train.supervisor import Supervisor  # noqa: F401
from graphc.train.training_util import *  # noqa: F401,F403
from graphc.train.learning_rate_decay import *  # noqa: F401,F403
from graphc.train.checkpoint_management import *  # noqa: F401,F403
from graphc.train.saver import *  # noqa: F401,F403
from graphc.train.checkpoint_utils import *  # noqa: F401,F403
from graphc.tf0_names import SummaryWriter  # noqa: F401,E402  (TF before 1.0)
from graphc.graph_io import export_meta_graph, import_meta_graph, write_graph  # noqa: F401,E402

# TF's tf.train.Example protos (example.proto) and SaverDef need tensorboard's protobuf
# runtime: loaded on first access, so `import graphc` works without it
_EXAMPLE_CLASSES = ("Example", "Features", "Feature", "Int64List", "FloatList", "BytesList")


def __getattr__(name):  # PEP 562
    from graphc.tf_formats import protos
    if name in _EXAMPLE_CLASSES:
        return getattr(protos.example_pb2(), name)
    if name == "SaverDef":
        return protos.saver_pb2().SaverDef
    raise AttributeError(f"module 'graphc.train' has no attribute {name!r}")
