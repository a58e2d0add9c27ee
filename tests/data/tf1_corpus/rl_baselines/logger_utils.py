import os

import tensorflow as tf


def explained_variance_op(ypred, y):
    _, vary = tf.nn.moments(y, axes=[0])
    return 1 - tf.nn.moments(y - ypred, axes=[0])[1] / vary


def make_session(num_cpu=1, make_default=False, graph=None):
    tf_config = tf.ConfigProto(inter_op_parallelism_threads=num_cpu,
                               intra_op_parallelism_threads=num_cpu)
    tf_config.gpu_options.allow_growth = True
    if make_default:
        return tf.InteractiveSession(config=tf_config, graph=graph)
    return tf.Session(config=tf_config, graph=graph)


def save_variables(save_path, variables=None, sess=None):
    sess = sess or tf.get_default_session()
    variables = variables or tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)
    ps = sess.run(variables)
    save_dict = {v.name: value for v, value in zip(variables, ps)}
    dirname = os.path.dirname(save_path)
    if any(dirname):
        os.makedirs(dirname, exist_ok=True)
    return save_dict


def summary_writer(logdir):
    return tf.summary.FileWriter(logdir)


def scalar_summary(tag, value):
    return tf.Summary(value=[tf.Summary.Value(tag=tag, simple_value=value)])
