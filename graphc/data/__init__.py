"""gc.data (tf.compat.v1.data): host-side input pipelines feeding graph tensors.

See dataset_ops.py for how pipelines run and iterator_ops.py for how their elements
reach a Session (the IteratorGetNext op).
"""
from graphc.data.dataset_ops import AUTOTUNE, Dataset  # noqa: F401
from graphc.data.readers import TextLineDataset, TFRecordDataset  # noqa: F401
from graphc.data.iterator_ops import (Iterator, get_output_classes,  # noqa: F401
                                      get_output_shapes, get_output_types,
                                      make_initializable_iterator, make_one_shot_iterator)


class experimental:  # noqa: N801 - tf.data.experimental
    from graphc.data.experimental_ops import (AUTOTUNE, group_by_window, map_and_batch,
                                              parallel_interleave)
