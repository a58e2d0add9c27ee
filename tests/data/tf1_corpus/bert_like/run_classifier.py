import collections
import os

import tensorflow as tf

import modeling

flags = tf.flags
FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "The input data dir.")
flags.DEFINE_string("bert_config_file", None, "The config json file.")
flags.DEFINE_string("output_dir", None, "The output directory.")
flags.DEFINE_bool("do_train", False, "Whether to run training.")
flags.DEFINE_integer("max_seq_length", 128, "The maximum total input sequence length.")
flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.")


class DataProcessor(object):
    @classmethod
    def _read_tsv(cls, input_file, quotechar=None):
        with tf.gfile.Open(input_file, "r") as f:
            return [line.strip().split("\t") for line in f]


def create_model(bert_config, is_training, input_ids, labels, num_labels):
    output_layer = tf.placeholder(tf.float32, [None, bert_config.hidden_size])
    hidden_size = output_layer.shape[-1].value
    output_weights = tf.get_variable(
        "output_weights", [num_labels, hidden_size],
        initializer=tf.truncated_normal_initializer(stddev=0.02))
    output_bias = tf.get_variable("output_bias", [num_labels],
                                  initializer=tf.zeros_initializer())
    with tf.variable_scope("loss"):
        if is_training:
            output_layer = tf.nn.dropout(output_layer, keep_prob=0.9)
        logits = tf.matmul(output_layer, output_weights, transpose_b=True)
        logits = tf.nn.bias_add(logits, output_bias)
        probabilities = tf.nn.softmax(logits, axis=-1)
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        one_hot_labels = tf.one_hot(labels, depth=num_labels, dtype=tf.float32)
        per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
        loss = tf.reduce_mean(per_example_loss)
        return loss, per_example_loss, logits, probabilities


def main(_):
    tf.logging.set_verbosity(tf.logging.INFO)
    bert_config = modeling.BertConfig.from_json_file(FLAGS.bert_config_file)
    tf.gfile.MakeDirs(FLAGS.output_dir)
    output_eval_file = os.path.join(FLAGS.output_dir, "eval_results.txt")
    with tf.gfile.GFile(output_eval_file, "w") as writer:
        tf.logging.info("***** Eval results *****")
        writer.write("%s = %s\n" % ("loss", "0"))
    tvars = tf.trainable_variables()
    for var in tvars:
        tf.logging.info("  name = %s, shape = %s", var.name, var.shape)


if __name__ == "__main__":
    flags.mark_flag_as_required("data_dir")
    flags.mark_flag_as_required("output_dir")
    tf.app.run()
