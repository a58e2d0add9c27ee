import tensorflow as tf

flags = tf.app.flags
FLAGS = flags.FLAGS

_LAYER_UIDS = {}


def glorot(shape, name=None):
    init_range = tf.sqrt(6.0 / (shape[0] + shape[1]))
    initial = tf.random_uniform(shape, minval=-init_range, maxval=init_range, dtype=tf.float32)
    return tf.Variable(initial, name=name)


def zeros(shape, name=None):
    initial = tf.zeros(shape, dtype=tf.float32)
    return tf.Variable(initial, name=name)


def sparse_dropout(x, keep_prob, noise_shape):
    random_tensor = keep_prob
    random_tensor += tf.random_uniform(noise_shape)
    dropout_mask = tf.cast(tf.floor(random_tensor), dtype=tf.bool)
    pre_out = tf.sparse_retain(x, dropout_mask)
    return pre_out * (1. / keep_prob)


def dot(x, y, sparse=False):
    if sparse:
        res = tf.sparse_tensor_dense_matmul(x, y)
    else:
        res = tf.matmul(x, y)
    return res


class Dense(object):
    def __init__(self, input_dim, output_dim, dropout=0., act=tf.nn.relu, bias=False):
        self.act = act
        with tf.variable_scope('dense_vars'):
            self.weights = glorot([input_dim, output_dim], name='weights')
            if bias:
                self.bias = zeros([output_dim], name='bias')
        self.dropout = dropout

    def __call__(self, inputs):
        x = tf.nn.dropout(inputs, 1 - self.dropout)
        output = dot(x, self.weights)
        return self.act(output)
