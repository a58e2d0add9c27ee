"""tf.contrib.lookup: TF1's lookup tables under their contrib names
(graphc/ops/lookup_ops.py)."""
from graphc.ops.lookup_ops import (FastHashSpec, HashTable,  # noqa: F401
                                   IdTableWithHashBuckets, KeyValueTensorInitializer,
                                   TextFileIdTableInitializer, TextFileIndex,
                                   TextFileInitializer, TextFileStringTableInitializer,
                                   index_table_from_file, index_table_from_tensor,
                                   index_to_string, index_to_string_table_from_file,
                                   index_to_string_table_from_tensor)
