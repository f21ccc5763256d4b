//! Firebase's push ids (`POST /{path}.json`, the SDKs' `push()` made by the
//! server): 8 characters of milliseconds, then 12 random ones, in an
//! alphabet that sorts like the numbers; ids made in the same millisecond
//! increment the random part, so they sort as they were made.

use super::Databases;

const ALPHABET: &[u8; 64] = b"-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz";

/// The last push id's time and random part.
#[derive(Default)]
pub(super) struct PushIds {
    time_ms: u64,
    random: [u8; 12],
}

impl Databases {
    /// A new push id, sorting after every one made before on this node.
    pub fn push_id(&self) -> String {
        let mut last = self.push.lock();
        let now = crate::codec::now_ms().max(last.time_ms);
        if now == last.time_ms {
            for digit in last.random.iter_mut().rev() {
                if *digit < 63 {
                    *digit += 1;
                    break;
                }
                *digit = 0;
            }
        } else {
            last.time_ms = now;
            for digit in last.random.iter_mut() {
                *digit = rand::random_range(0..64);
            }
        }
        let mut id = [0u8; 20];
        let mut time = now;
        for slot in id[..8].iter_mut().rev() {
            *slot = ALPHABET[(time % 64) as usize];
            time /= 64;
        }
        for (slot, digit) in id[8..].iter_mut().zip(last.random) {
            *slot = ALPHABET[digit as usize];
        }
        String::from_utf8(id.to_vec()).expect("the alphabet is ASCII")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_ids_are_twenty_characters_and_sort_as_made() {
        let databases = Databases::new(false);
        let ids: Vec<String> = (0..2000).map(|_| databases.push_id()).collect();
        assert!(ids.iter().all(|id| id.len() == 20));
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, ids, "later ids sort after earlier ones, also within a millisecond");
        assert!(ids.windows(2).all(|w| w[0] != w[1]));
    }
}
