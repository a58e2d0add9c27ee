"""TensorFlow's own file formats, read and written with TensorFlow's message definitions.

    graph_def.py   GraphDef protos <-> graphc node dicts (the TF op table)
    records.py     TFRecord framing (length, masked CRC32C, data, masked CRC32C)
    example.py     tf.train.Example parsing (parse_single_example / parse_example)
    table.py       the LevelDB table layout of a checkpoint's `.index`
    bundle.py      TF checkpoints (V2 tensor bundles): `.index` + `.data-00000-of-00001`

The messages come from the `tensorboard` package (the `tf-formats` extra); protos.py
imports them on first use so `import graphc` works without it."""
