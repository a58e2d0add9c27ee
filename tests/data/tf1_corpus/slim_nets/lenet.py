import tensorflow as tf

slim = tf.contrib.slim


def lenet(images, num_classes=10, is_training=False, dropout_keep_prob=0.5, scope='LeNet'):
    end_points = {}
    with tf.variable_scope(scope, 'LeNet', [images]):
        net = end_points['conv1'] = slim.conv2d(images, 32, [5, 5], scope='conv1')
        net = end_points['pool1'] = slim.max_pool2d(net, [2, 2], 2, scope='pool1')
        net = end_points['conv2'] = slim.conv2d(net, 64, [5, 5], scope='conv2')
        net = end_points['pool2'] = slim.max_pool2d(net, [2, 2], 2, scope='pool2')
        net = slim.flatten(net)
        end_points['Flatten'] = net
        net = end_points['fc3'] = slim.fully_connected(net, 1024, scope='fc3')
        net = end_points['dropout3'] = slim.dropout(net, dropout_keep_prob,
                                                    is_training=is_training, scope='dropout3')
        logits = end_points['Logits'] = slim.fully_connected(net, num_classes,
                                                             activation_fn=None, scope='fc4')
    end_points['Predictions'] = tf.nn.softmax(logits, name='Predictions')
    return logits, end_points


def lenet_arg_scope(weight_decay=0.0):
    with slim.arg_scope(
            [slim.conv2d, slim.fully_connected],
            weights_regularizer=slim.l2_regularizer(weight_decay),
            weights_initializer=tf.truncated_normal_initializer(stddev=0.1),
            activation_fn=tf.nn.relu) as sc:
        return sc


def train(images, labels):
    logits, _ = lenet(images, is_training=True)
    loss = tf.losses.softmax_cross_entropy(onehot_labels=labels, logits=logits)
    total_loss = tf.losses.get_total_loss()
    optimizer = tf.train.MomentumOptimizer(0.01, 0.9)
    update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    with tf.control_dependencies(update_ops):
        train_op = optimizer.minimize(total_loss, global_step=tf.train.get_or_create_global_step())
    return train_op, loss
