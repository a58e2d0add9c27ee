import tensorflow as tf

import model


def top_k_logits(logits, k):
    if k == 0:
        return logits

    def _top_k():
        values, _ = tf.nn.top_k(logits, k=k)
        min_values = values[:, -1, tf.newaxis]
        return tf.where(logits < min_values,
                        tf.ones_like(logits, dtype=logits.dtype) * -1e10, logits)
    return tf.cond(tf.equal(k, 0), lambda: logits, lambda: _top_k())


def sample_sequence(*, hparams, length, start_token=None, batch_size=None, context=None,
                    temperature=1, top_k=0):
    if start_token is None:
        assert context is not None, 'Specify exactly one of start_token and context!'
    else:
        context = tf.fill([batch_size, 1], start_token)

    def step(hparams, tokens, past=None):
        lm_output = model.model(hparams=hparams, X=tokens, past=past, reuse=tf.AUTO_REUSE)
        logits = lm_output['logits'][:, :, :hparams.n_vocab]
        return {'logits': logits}

    with tf.name_scope('sample_sequence'):
        def body(past, prev, output):
            next_outputs = step(hparams, prev, past=past)
            logits = next_outputs['logits'][:, -1, :] / tf.to_float(temperature)
            logits = top_k_logits(logits, k=top_k)
            samples = tf.multinomial(logits, num_samples=1, output_dtype=tf.int32)
            return [past, samples, tf.concat([output, samples], axis=1)]

        _, _, tokens = tf.while_loop(
            cond=lambda *args: True, body=body, maximum_iterations=length,
            loop_vars=[None, context[:, -1], context],
            shape_invariants=[tf.TensorShape([batch_size, None]),
                              tf.TensorShape([batch_size]),
                              tf.TensorShape([batch_size, None])],
            back_prop=False)
        return tokens


def interact_model(model_name='117M', seed=None, nsamples=1, batch_size=1, length=None):
    hparams = model.default_hparams()
    with tf.Session(graph=tf.Graph()) as sess:
        context = tf.placeholder(tf.int32, [batch_size, None])
        tf.set_random_seed(seed)
        output = sample_sequence(hparams=hparams, length=length, context=context,
                                 batch_size=batch_size)
        saver = tf.train.Saver()
        ckpt = tf.train.latest_checkpoint('models/' + model_name)
        saver.restore(sess, ckpt)
        return output
