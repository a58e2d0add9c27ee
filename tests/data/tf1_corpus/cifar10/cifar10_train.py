import time
from datetime import datetime

import tensorflow as tf

import cifar10

FLAGS = tf.app.flags.FLAGS
tf.app.flags.DEFINE_string('train_dir', '/tmp/cifar10_train', """Directory for event logs.""")
tf.app.flags.DEFINE_integer('max_steps', 1000000, """Number of batches to run.""")
tf.app.flags.DEFINE_boolean('log_device_placement', False, """Whether to log placement.""")
tf.app.flags.DEFINE_integer('log_frequency', 10, """How often to log results.""")


def train():
    with tf.Graph().as_default():
        global_step = tf.train.get_or_create_global_step()
        images = tf.placeholder(tf.float32, [FLAGS.batch_size, 24, 24, 3])
        labels = tf.placeholder(tf.int32, [FLAGS.batch_size])
        logits = cifar10.inference(images)
        loss = cifar10.loss(logits, labels)
        train_op = cifar10.train(loss, global_step)

        class _LoggerHook(tf.train.SessionRunHook):
            def begin(self):
                self._step = -1
                self._start_time = time.time()

            def before_run(self, run_context):
                self._step += 1
                return tf.train.SessionRunArgs(loss)

        with tf.train.MonitoredTrainingSession(
                checkpoint_dir=FLAGS.train_dir,
                hooks=[tf.train.StopAtStepHook(last_step=FLAGS.max_steps),
                       tf.train.NanTensorHook(loss), _LoggerHook()],
                config=tf.ConfigProto(log_device_placement=FLAGS.log_device_placement)) as sess:
            while not sess.should_stop():
                sess.run(train_op)
        print(datetime.now())


def main(argv=None):
    if tf.gfile.Exists(FLAGS.train_dir):
        tf.gfile.DeleteRecursively(FLAGS.train_dir)
    tf.gfile.MakeDirs(FLAGS.train_dir)
    tf.logging.set_verbosity(tf.logging.INFO)
    train()


if __name__ == '__main__':
    tf.app.run()
