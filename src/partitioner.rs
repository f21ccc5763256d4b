//! pk → partition, exactly as Kafka's default partitioner does it for a keyed
//! record: `(murmur2(key) & 0x7fffffff) % partitions`, for any partition count.
//! A Kafka producer that keys its records by `pk` therefore lands every record
//! in the partition Tern would have chosen.

/// Kafka's `Utils.murmur2` (MurmurHash2, seed 0x9747b28c), bit for bit.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = SEED ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() == 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of `pk` in a namespace of `partitions` partitions.
pub fn partition_of(pk: &str, partitions: u32) -> u32 {
    assert!(partitions > 0, "a namespace has at least one partition");
    let positive = (murmur2(pk.as_bytes()) & 0x7fff_ffff) as u32;
    let partition = positive % partitions;
    debug_assert!(partition < partitions);
    partition
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors of Kafka's own `UtilsTest.testMurmur2`.
    #[test]
    fn murmur2_matches_kafka_vectors() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
            (b"abc", 479_470_107),
        ];
        for (input, expected) in cases {
            assert_eq!(murmur2(input), expected, "murmur2({:?})", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn partition_is_kafka_to_positive_mod_n() {
        // -973932308 & 0x7fffffff = 1173551340
        assert_eq!(partition_of("21", 16), 1_173_551_340 % 16);
        assert_eq!(partition_of("21", 7), 1_173_551_340 % 7);
        for n in [1u32, 2, 3, 5, 16, 17, 1000] {
            for pk in ["a", "user:42", "é", "a-little-bit-long-string"] {
                assert!(partition_of(pk, n) < n);
            }
        }
    }
}
