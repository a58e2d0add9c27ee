import numpy as np
import tensorflow as tf


def ortho_init(scale=1.0):
    def _ortho_init(shape, dtype, partition_info=None):
        shape = tuple(shape)
        flat_shape = (shape[0], np.prod(shape[1:]))
        a = np.random.normal(0.0, 1.0, flat_shape)
        u, _, v = np.linalg.svd(a, full_matrices=False)
        q = u if u.shape == flat_shape else v
        return (scale * q.reshape(shape)).astype(np.float32)
    return _ortho_init


def fc(x, scope, nh, *, init_scale=1.0, init_bias=0.0):
    with tf.variable_scope(scope):
        nin = x.get_shape()[1].value
        w = tf.get_variable("w", [nin, nh], initializer=ortho_init(init_scale))
        b = tf.get_variable("b", [nh], initializer=tf.constant_initializer(init_bias))
        return tf.matmul(x, w) + b


def conv_to_fc(x):
    nh = np.prod([v.value for v in x.get_shape()[1:]])
    return tf.reshape(x, [-1, nh])


def cat_entropy(logits):
    a0 = logits - tf.reduce_max(logits, 1, keepdims=True)
    ea0 = tf.exp(a0)
    z0 = tf.reduce_sum(ea0, 1, keepdims=True)
    p0 = ea0 / z0
    return tf.reduce_sum(p0 * (tf.log(z0) - a0), 1)


class Model(object):
    def __init__(self, ob_space, ac_space, nenvs, nsteps, ent_coef=0.01, vf_coef=0.5,
                 max_grad_norm=0.5, lr=7e-4, alpha=0.99, epsilon=1e-5):
        config = tf.ConfigProto(allow_soft_placement=True, intra_op_parallelism_threads=1,
                                inter_op_parallelism_threads=1)
        config.gpu_options.allow_growth = True
        sess = tf.Session(config=config)
        A = tf.placeholder(tf.int32, [None])
        ADV = tf.placeholder(tf.float32, [None])
        R = tf.placeholder(tf.float32, [None])
        LR = tf.placeholder(tf.float32, [])
        X = tf.placeholder(tf.float32, [None, 4])
        with tf.variable_scope("model", reuse=tf.AUTO_REUSE):
            h = tf.nn.relu(fc(X, 'fc1', 64))
            pi = fc(h, 'pi', 2)
            vf = fc(h, 'v', 1)[:, 0]
        neglogpac = tf.nn.sparse_softmax_cross_entropy_with_logits(logits=pi, labels=A)
        pg_loss = tf.reduce_mean(ADV * neglogpac)
        vf_loss = tf.reduce_mean(tf.squared_difference(tf.squeeze(vf), R) / 2.0)
        entropy = tf.reduce_mean(cat_entropy(pi))
        loss = pg_loss - entropy * ent_coef + vf_loss * vf_coef
        params = tf.trainable_variables("model")
        grads = tf.gradients(loss, params)
        if max_grad_norm is not None:
            grads, grad_norm = tf.clip_by_global_norm(grads, max_grad_norm)
        grads = list(zip(grads, params))
        trainer = tf.train.RMSPropOptimizer(learning_rate=LR, decay=alpha, epsilon=epsilon)
        self._train = trainer.apply_gradients(grads)
        self.saver = tf.train.Saver(max_to_keep=1)
        tf.global_variables_initializer().run(session=sess)
        u = tf.random_uniform(tf.shape(pi))
        self.action = tf.argmax(pi - tf.log(-tf.log(u)), axis=-1)
