import math
import os

import numpy as np
import tensorflow as tf

batch_size = 128
embedding_size = 128
vocabulary_size = 50000
num_sampled = 64
valid_examples = np.random.choice(100, 16, replace=False)

graph = tf.Graph()
with graph.as_default():
    with tf.name_scope('inputs'):
        train_inputs = tf.placeholder(tf.int32, shape=[batch_size])
        train_labels = tf.placeholder(tf.int32, shape=[batch_size, 1])
        valid_dataset = tf.constant(valid_examples, dtype=tf.int32)
    with tf.device('/cpu:0'):
        with tf.name_scope('embeddings'):
            embeddings = tf.Variable(
                tf.random_uniform([vocabulary_size, embedding_size], -1.0, 1.0))
            embed = tf.nn.embedding_lookup(embeddings, train_inputs)
        with tf.name_scope('weights'):
            nce_weights = tf.Variable(
                tf.truncated_normal([vocabulary_size, embedding_size],
                                    stddev=1.0 / math.sqrt(embedding_size)))
        with tf.name_scope('biases'):
            nce_biases = tf.Variable(tf.zeros([vocabulary_size]))
    with tf.name_scope('loss'):
        loss = tf.reduce_mean(
            tf.nn.nce_loss(weights=nce_weights, biases=nce_biases, labels=train_labels,
                           inputs=embed, num_sampled=num_sampled,
                           num_classes=vocabulary_size))
    tf.summary.scalar('loss', loss)
    with tf.name_scope('optimizer'):
        optimizer = tf.train.GradientDescentOptimizer(1.0).minimize(loss)
    norm = tf.sqrt(tf.reduce_sum(tf.square(embeddings), 1, keepdims=True))
    normalized_embeddings = embeddings / norm
    valid_embeddings = tf.nn.embedding_lookup(normalized_embeddings, valid_dataset)
    similarity = tf.matmul(valid_embeddings, normalized_embeddings, transpose_b=True)
    merged = tf.summary.merge_all()
    init = tf.global_variables_initializer()
    saver = tf.train.Saver()

with tf.Session(graph=graph) as session:
    writer = tf.summary.FileWriter('/tmp/log', session.graph)
    init.run()
    run_metadata = tf.RunMetadata()
    for step in range(10):
        _, summary, loss_val = session.run(
            [optimizer, merged, loss],
            feed_dict={train_inputs: np.zeros(batch_size), train_labels: np.zeros((batch_size, 1))},
            run_metadata=run_metadata)
        writer.add_summary(summary, step)
        if step == 9:
            writer.add_run_metadata(run_metadata, 'step%d' % step)
    saver.save(session, os.path.join('/tmp/log', 'model.ckpt'))
    final_embeddings = normalized_embeddings.eval()
    writer.close()
