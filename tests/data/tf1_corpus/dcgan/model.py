import os
import time

import numpy as np
import tensorflow as tf

from ops import batch_norm, conv2d, deconv2d, linear, lrelu


class DCGAN(object):
    def __init__(self, sess, batch_size=64, z_dim=100, gf_dim=64, df_dim=64, c_dim=3,
                 checkpoint_dir=None):
        self.sess = sess
        self.batch_size = batch_size
        self.z_dim = z_dim
        self.d_bn1 = batch_norm(name='d_bn1')
        self.g_bn0 = batch_norm(name='g_bn0')
        self.checkpoint_dir = checkpoint_dir
        self.build_model()

    def build_model(self):
        self.inputs = tf.placeholder(tf.float32, [self.batch_size, 64, 64, 3], name='real_images')
        self.z = tf.placeholder(tf.float32, [None, self.z_dim], name='z')
        self.z_sum = tf.summary.histogram("z", self.z)
        self.G = self.generator(self.z)
        self.D, self.D_logits = self.discriminator(self.inputs, reuse=False)
        self.D_, self.D_logits_ = self.discriminator(self.G, reuse=True)

        def sigmoid_cross_entropy_with_logits(x, y):
            return tf.nn.sigmoid_cross_entropy_with_logits(logits=x, labels=y)

        self.d_loss_real = tf.reduce_mean(
            sigmoid_cross_entropy_with_logits(self.D_logits, tf.ones_like(self.D)))
        self.d_loss_fake = tf.reduce_mean(
            sigmoid_cross_entropy_with_logits(self.D_logits_, tf.zeros_like(self.D_)))
        self.g_loss = tf.reduce_mean(
            sigmoid_cross_entropy_with_logits(self.D_logits_, tf.ones_like(self.D_)))
        self.d_loss = self.d_loss_real + self.d_loss_fake
        self.d_loss_sum = tf.summary.scalar("d_loss", self.d_loss)
        t_vars = tf.trainable_variables()
        self.d_vars = [var for var in t_vars if 'd_' in var.name]
        self.g_vars = [var for var in t_vars if 'g_' in var.name]
        self.saver = tf.train.Saver()

    def train(self, config):
        d_optim = tf.train.AdamOptimizer(config.learning_rate, beta1=config.beta1) \
            .minimize(self.d_loss, var_list=self.d_vars)
        g_optim = tf.train.AdamOptimizer(config.learning_rate, beta1=config.beta1) \
            .minimize(self.g_loss, var_list=self.g_vars)
        try:
            tf.global_variables_initializer().run()
        except AttributeError:
            tf.initialize_all_variables().run()
        self.g_sum = tf.summary.merge([self.z_sum, self.d_loss_sum])
        self.writer = tf.summary.FileWriter("./logs", self.sess.graph)
        start_time = time.time()
        return d_optim, g_optim, start_time

    def discriminator(self, image, reuse=False):
        with tf.variable_scope("discriminator") as scope:
            if reuse:
                scope.reuse_variables()
            h0 = lrelu(conv2d(image, 64, name='d_h0_conv'))
            h1 = lrelu(self.d_bn1(conv2d(h0, 128, name='d_h1_conv')))
            h4 = linear(tf.reshape(h1, [self.batch_size, -1]), 1, 'd_h4_lin')
            return tf.nn.sigmoid(h4), h4

    def generator(self, z):
        with tf.variable_scope("generator"):
            z_ = linear(z, 64 * 8 * 4 * 4, 'g_h0_lin')
            h0 = tf.reshape(z_, [-1, 4, 4, 64 * 8])
            h0 = tf.nn.relu(self.g_bn0(h0))
            h1 = deconv2d(h0, [self.batch_size, 8, 8, 3], name='g_h1')
            return tf.nn.tanh(h1)

    def save(self, checkpoint_dir, step):
        if not os.path.exists(checkpoint_dir):
            os.makedirs(checkpoint_dir)
        self.saver.save(self.sess, os.path.join(checkpoint_dir, "DCGAN.model"), global_step=step)

    def load(self, checkpoint_dir):
        ckpt = tf.train.get_checkpoint_state(checkpoint_dir)
        if ckpt and ckpt.model_checkpoint_path:
            ckpt_name = os.path.basename(ckpt.model_checkpoint_path)
            self.saver.restore(self.sess, os.path.join(checkpoint_dir, ckpt_name))
            return True
        return False
