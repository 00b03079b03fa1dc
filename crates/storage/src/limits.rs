//! Thresholds that decide when a value leaves its compact encoding (and whether serialized
//! strings are compressed), with Redis's config names and defaults. The server copies them from the configuration into each shard.

use crate::stream::NodeLimits;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodingLimits {
    /// `hash-max-listpack-entries`
    pub hash_max_entries: usize,
    /// `hash-max-listpack-value`
    pub hash_max_value: usize,
    /// `set-max-intset-entries`
    pub set_max_intset_entries: usize,
    /// `zset-max-listpack-entries`
    pub zset_max_entries: usize,
    /// `zset-max-listpack-value`
    pub zset_max_value: usize,
    /// `list-max-listpack-size`: entries per list node when positive, else a size class
    /// (-1 = 4 KB ... -5 = 64 KB).
    pub list_max_listpack_size: i64,
    /// `hll-sparse-max-bytes`: a sparse HyperLogLog growing past this turns dense.
    pub hll_sparse_max_bytes: usize,
    /// `rdbcompression`: DUMP payloads and snapshot files LZF-compress long strings.
    pub rdb_compression: bool,
    /// `stream-node-max-bytes` and `stream-node-max-entries`.
    pub stream_node: NodeLimits,
}

impl Default for EncodingLimits {
    fn default() -> Self {
        EncodingLimits {
            hash_max_entries: 128,
            hash_max_value: 64,
            set_max_intset_entries: 512,
            zset_max_entries: 128,
            zset_max_value: 64,
            list_max_listpack_size: -2,
            hll_sparse_max_bytes: 3000,
            rdb_compression: true,
            stream_node: NodeLimits::default(),
        }
    }
}
