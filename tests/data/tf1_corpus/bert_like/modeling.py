import copy
import json
import math

import numpy as np
import six
import tensorflow as tf


class BertConfig(object):
    def __init__(self, vocab_size, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 initializer_range=0.02):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.initializer_range = initializer_range

    @classmethod
    def from_json_file(cls, json_file):
        with tf.gfile.GFile(json_file, "r") as reader:
            text = reader.read()
        return cls(**json.loads(text))


def gelu(x):
    cdf = 0.5 * (1.0 + tf.tanh((np.sqrt(2 / np.pi) * (x + 0.044715 * tf.pow(x, 3)))))
    return x * cdf


def dropout(input_tensor, dropout_prob):
    if dropout_prob is None or dropout_prob == 0.0:
        return input_tensor
    return tf.nn.dropout(input_tensor, 1.0 - dropout_prob)


def layer_norm(input_tensor, name=None):
    return tf.contrib.layers.layer_norm(inputs=input_tensor, begin_norm_axis=-1,
                                        begin_params_axis=-1, scope=name)


def create_initializer(initializer_range=0.02):
    return tf.truncated_normal_initializer(stddev=initializer_range)


def embedding_lookup(input_ids, vocab_size, embedding_size=128, initializer_range=0.02,
                     word_embedding_name="word_embeddings", use_one_hot_embeddings=False):
    if input_ids.shape.ndims == 2:
        input_ids = tf.expand_dims(input_ids, axis=[-1])
    embedding_table = tf.get_variable(name=word_embedding_name,
                                      shape=[vocab_size, embedding_size],
                                      initializer=create_initializer(initializer_range))
    flat_input_ids = tf.reshape(input_ids, [-1])
    if use_one_hot_embeddings:
        one_hot_input_ids = tf.one_hot(flat_input_ids, depth=vocab_size)
        output = tf.matmul(one_hot_input_ids, embedding_table)
    else:
        output = tf.gather(embedding_table, flat_input_ids)
    return output, embedding_table


def attention_layer(from_tensor, to_tensor, attention_mask=None, num_attention_heads=1,
                    size_per_head=512, batch_size=None, from_seq_length=None,
                    to_seq_length=None):
    def transpose_for_scores(input_tensor, batch_size, num_attention_heads, seq_length, width):
        output_tensor = tf.reshape(input_tensor,
                                   [batch_size, seq_length, num_attention_heads, width])
        return tf.transpose(output_tensor, [0, 2, 1, 3])

    query_layer = tf.layers.dense(from_tensor, num_attention_heads * size_per_head,
                                  name="query", kernel_initializer=create_initializer())
    key_layer = tf.layers.dense(to_tensor, num_attention_heads * size_per_head, name="key",
                                kernel_initializer=create_initializer())
    query_layer = transpose_for_scores(query_layer, batch_size, num_attention_heads,
                                       from_seq_length, size_per_head)
    key_layer = transpose_for_scores(key_layer, batch_size, num_attention_heads,
                                     to_seq_length, size_per_head)
    attention_scores = tf.matmul(query_layer, key_layer, transpose_b=True)
    attention_scores = tf.multiply(attention_scores, 1.0 / math.sqrt(float(size_per_head)))
    if attention_mask is not None:
        attention_mask = tf.expand_dims(attention_mask, axis=[1])
        adder = (1.0 - tf.cast(attention_mask, tf.float32)) * -10000.0
        attention_scores += adder
    attention_probs = tf.nn.softmax(attention_scores)
    return attention_probs


def get_assignment_map_from_checkpoint(tvars, init_checkpoint):
    name_to_variable = {}
    for var in tvars:
        name_to_variable[var.name.split(":")[0]] = var
    init_vars = tf.train.list_variables(init_checkpoint)
    assignment_map = {}
    for x in init_vars:
        (name, var) = (x[0], x[1])
        if name in name_to_variable:
            assignment_map[name] = name
    return assignment_map


def get_shape_list(tensor, expected_rank=None, name=None):
    shape = tensor.shape.as_list()
    dyn_shape = tf.shape(tensor)
    return [dyn_shape[i] if d is None else d for i, d in enumerate(shape)]
