"""tf.data.experimental (tf.contrib.data) transformations, for Dataset.apply:
map_and_batch and parallel_interleave, which TF1 fuses or parallelizes for speed and which
give the elements of their unfused, sequential forms (graphc's pipelines run on one
thread, so sloppy=True changes nothing), and group_by_window."""
from graphc.data.dataset_ops import AUTOTUNE

__all__ = ["map_and_batch", "parallel_interleave", "group_by_window", "AUTOTUNE"]


def map_and_batch(map_func, batch_size, num_parallel_batches=None, drop_remainder=False,
                  num_parallel_calls=None):
    """dataset.map(map_func).batch(batch_size, drop_remainder)."""
    if num_parallel_batches is not None and num_parallel_calls is not None:
        raise ValueError("map_and_batch: the `num_parallel_batches` and "
                         "`num_parallel_calls` arguments are mutually exclusive.")
    return lambda dataset: dataset.map(map_func).batch(batch_size, drop_remainder)


def parallel_interleave(map_func, cycle_length, block_length=1, sloppy=False,
                        buffer_output_elements=None, prefetch_input_elements=None):
    """dataset.interleave(map_func, cycle_length, block_length), in its deterministic
    order."""
    return lambda dataset: dataset.interleave(map_func, cycle_length, block_length)


def group_by_window(key_func, reduce_func, window_size=None, window_size_func=None):
    """Groups elements by key_func into windows of window_size (or window_size_func(key))
    and reduces each with reduce_func(key, window_dataset); see GroupByWindowDataset."""
    if (window_size is None) == (window_size_func is None):
        raise ValueError("group_by_window: either the `window_size` argument or the "
                         "`window_size_func` argument must be specified (not both).")
    if window_size is not None:
        from graphc.ops.constant_ops import constant
        from graphc import dtypes

        def window_size_func(unused_key):
            return constant(window_size, dtypes.int64)

    def apply(dataset):
        from graphc.data.interleave_ops import GroupByWindowDataset
        return GroupByWindowDataset(dataset, key_func, reduce_func, window_size_func)
    return apply
