"""tf.lookup: TF1's lookup tables (graphc/ops/lookup_ops.py)."""
from graphc.ops.lookup_ops import (HashTable, IdTableWithHashBuckets,  # noqa: F401
                                   KeyValueTensorInitializer, StaticHashTable,
                                   StaticVocabularyTable, TextFileIdTableInitializer,
                                   TextFileIndex, TextFileInitializer,
                                   TextFileStringTableInitializer, index_table_from_file,
                                   index_table_from_tensor, index_to_string_table_from_file,
                                   index_to_string_table_from_tensor, tables_initializer)
