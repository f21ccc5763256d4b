//! Named random streams: one per purpose, each seeded from the run's seed
//! and its own name.
//!
//! A single RNG shared by every choice couples them all: one more draw
//! anywhere (a new fault, a writer that flips one more coin) shifts every
//! draw after it, so a seed that found a bug yesterday runs a different
//! world today. With a stream per purpose, a change to how one purpose
//! draws leaves every other purpose's draws as they were.
//!
//! The algorithm is named (ChaCha12), not rand's `StdRng`, which rand may
//! change between releases: a dependency update must not move every seed.

use rand::SeedableRng;

/// One purpose's stream of random draws.
pub(super) type Stream = rand_chacha::ChaCha12Rng;

/// The context string of the key derivation (BLAKE3's `derive_key`): no
/// other use of BLAKE3 in Tern can produce the same streams.
const STREAM_CONTEXT: &str = "tern sim 2026-11-27 named random stream";

/// The stream called `name` of the run seeded with `seed`.
pub(super) fn stream(seed: u64, name: &str) -> Stream {
    assert!(!name.is_empty(), "a stream has a name");
    let mut hasher = blake3::Hasher::new_derive_key(STREAM_CONTEXT);
    hasher.update(&seed.to_le_bytes());
    hasher.update(name.as_bytes());
    Stream::from_seed(*hasher.finalize().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::stream;
    use rand::Rng;

    fn first_draws(seed: u64, name: &str) -> Vec<u64> {
        let mut rng = stream(seed, name);
        (0..4).map(|_| rng.random()).collect()
    }

    #[test]
    fn a_stream_is_a_function_of_its_seed_and_name() {
        assert_eq!(first_draws(7, "writes"), first_draws(7, "writes"));
        assert_ne!(first_draws(7, "writes"), first_draws(8, "writes"));
        assert_ne!(first_draws(7, "writes"), first_draws(7, "actions"));
    }
}
