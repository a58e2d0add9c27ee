"""The workloads of tools/peers_bench.py (an identical copy of ../shared/bench/peers_bench.py,
kept here so that a clone of this repository can run them) built for graphc:
`build(workload, tf)` returns what tools/compile_time.py --scale times. OWN_WORKLOADS are
graphc's own (not in peers_bench.py): resnet50_train. peers_bench.py's
`make_data_new` gives the same initial weights everywhere and its `build_tf1_new` is plain
tf.compat.v1 code, run here with `import graphc as tf`.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_bench import build_tf1_new, make_data_new  # noqa: E402


def build(workload, tf):
    """(session, fetch, feed) of one training step of `workload` in a fresh graph, its
    variables initialized the way peers_bench.py's build_tf1 does (initial values fed)."""
    import numpy as np
    g = tf.Graph()
    inits = {}

    def var(name, arr):
        ph = tf.placeholder(tf.as_dtype(arr.dtype), arr.shape, name=name + "_init")
        v = tf.Variable(ph, name=name)
        inits[v.initializer] = {ph: arr}
        return v

    post_init = []
    with g.as_default():
        if workload in OWN_WORKLOADS:
            feed, fetch = OWN_WORKLOADS[workload](tf)
            post_init.append((tf.global_variables_initializer(), {}))
        else:
            d = make_data_new(workload, np.random.default_rng(0))
            feed, fetch, _, post_init, _ = build_tf1_new(workload, d, tf, var, inits)
    sess = tf.Session(graph=g)
    for op, fd in list(inits.items()) + post_init:
        sess.run(op, fd)
    return sess, fetch, feed


# ResNet-50 (v1.5: the stride on the bottleneck's 3x3, as TF's official resnet_model.py) for
# one Momentum training step. The spatial size is small because the compile is the point:
# the graph (ops, kernels, buffers) does not depend on it, only the step's FLOPs do.
R50_BATCH, R50_HW, R50_CLASSES = 2, 64, 10
R50_BLOCKS, R50_FILTERS = (3, 4, 6, 3), (64, 128, 256, 512)


def build_resnet50_train(tf):
    """(feed, fetch) of one ResNet-50 training step in plain tf.compat.v1 / tf.layers code,
    built inside the caller's default graph with the layers' own initializers."""
    import numpy as np
    rng = np.random.default_rng(0)
    x = tf.placeholder(tf.float32, [R50_BATCH, R50_HW, R50_HW, 3], name="x")
    y = tf.placeholder(tf.int32, [R50_BATCH], name="y")

    def bn(h):
        return tf.layers.batch_normalization(h, axis=3, momentum=0.9, epsilon=1e-5,
                                             training=True, fused=True)

    def conv(h, filters, k, stride):  # conv2d_fixed_padding
        if stride > 1:
            pb = (k - 1) // 2
            h = tf.pad(h, [[0, 0], [pb, k - 1 - pb], [pb, k - 1 - pb], [0, 0]])
        return tf.layers.conv2d(h, filters, k, strides=stride, use_bias=False,
                                padding="valid" if stride > 1 else "same")

    def bottleneck(h, filters, stride, project):
        shortcut = bn(conv(h, 4 * filters, 1, stride)) if project else h
        o = tf.nn.relu(bn(conv(h, filters, 1, 1)))
        o = tf.nn.relu(bn(conv(o, filters, 3, stride)))
        o = bn(conv(o, 4 * filters, 1, 1))
        return tf.nn.relu(o + shortcut)

    h = tf.nn.relu(bn(conv(x, 64, 7, 2)))
    h = tf.layers.max_pooling2d(h, 3, 2, padding="same")
    for stage, (blocks, filters) in enumerate(zip(R50_BLOCKS, R50_FILTERS)):
        for b in range(blocks):
            h = bottleneck(h, filters, 2 if (stage > 0 and b == 0) else 1, b == 0)
    logits = tf.layers.dense(tf.reduce_mean(h, axis=[1, 2]), R50_CLASSES)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                         logits=logits))
    with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
        train_op = tf.train.MomentumOptimizer(0.01, 0.9).minimize(loss)
    feed = {x: rng.standard_normal(x.shape.as_list(), dtype=np.float32),
            y: rng.integers(0, R50_CLASSES, R50_BATCH).astype(np.int32)}
    return feed, [train_op, loss]


OWN_WORKLOADS = {"resnet50_train": build_resnet50_train}
