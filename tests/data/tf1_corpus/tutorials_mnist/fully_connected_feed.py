import os
import time

import tensorflow as tf
from tensorflow.examples.tutorials.mnist import input_data

flags = tf.app.flags
FLAGS = flags.FLAGS
flags.DEFINE_float('learning_rate', 0.01, 'Initial learning rate.')
flags.DEFINE_integer('max_steps', 2000, 'Number of steps to run trainer.')
flags.DEFINE_integer('batch_size', 100, 'Batch size.')
flags.DEFINE_string('log_dir', '/tmp/logs', 'Directory to put the log data.')


def inference(images, hidden_units):
    with tf.name_scope('hidden1'):
        weights = tf.Variable(tf.truncated_normal([784, hidden_units], stddev=0.03),
                              name='weights')
        biases = tf.Variable(tf.zeros([hidden_units]), name='biases')
        hidden1 = tf.nn.relu(tf.matmul(images, weights) + biases)
    with tf.name_scope('softmax_linear'):
        weights = tf.Variable(tf.truncated_normal([hidden_units, 10], stddev=0.1))
        biases = tf.Variable(tf.zeros([10]))
        return tf.matmul(hidden1, weights) + biases


def loss(logits, labels):
    labels = tf.to_int64(labels)
    return tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)


def training(loss_value, learning_rate):
    tf.summary.scalar('loss', loss_value)
    optimizer = tf.train.GradientDescentOptimizer(learning_rate)
    global_step = tf.Variable(0, name='global_step', trainable=False)
    return optimizer.minimize(loss_value, global_step=global_step)


def evaluation(logits, labels):
    correct = tf.nn.in_top_k(logits, labels, 1)
    return tf.reduce_sum(tf.cast(correct, tf.int32))


def run_training():
    data_sets = input_data.read_data_sets(FLAGS.log_dir)
    with tf.Graph().as_default():
        images_placeholder = tf.placeholder(tf.float32, shape=(FLAGS.batch_size, 784))
        labels_placeholder = tf.placeholder(tf.int32, shape=(FLAGS.batch_size))
        logits = inference(images_placeholder, 128)
        loss_value = loss(logits, labels_placeholder)
        train_op = training(loss_value, FLAGS.learning_rate)
        eval_correct = evaluation(logits, labels_placeholder)
        summary = tf.summary.merge_all()
        init = tf.global_variables_initializer()
        saver = tf.train.Saver()
        sess = tf.Session()
        summary_writer = tf.summary.FileWriter(FLAGS.log_dir, sess.graph)
        sess.run(init)
        for step in range(FLAGS.max_steps):
            start_time = time.time()
            _, loss_v = sess.run([train_op, loss_value])
            if step % 100 == 0:
                summary_str = sess.run(summary)
                summary_writer.add_summary(summary_str, step)
                summary_writer.flush()
                saver.save(sess, os.path.join(FLAGS.log_dir, 'model.ckpt'), global_step=step)


def main(_):
    if tf.gfile.Exists(FLAGS.log_dir):
        tf.gfile.DeleteRecursively(FLAGS.log_dir)
    tf.gfile.MakeDirs(FLAGS.log_dir)
    run_training()


if __name__ == '__main__':
    tf.app.run()
