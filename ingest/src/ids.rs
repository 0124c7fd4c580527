//! Stable 64-bit ids for things traces name rather than number (Alibaba
//! job and machine names, GCE VM names, feature values). FNV-1a: the same
//! name gives the same id on every machine and across restarts, which the
//! std `Hasher`s do not promise.

use std::hash::Hasher;

pub fn stable_id(bytes: &[u8]) -> u64 {
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(bytes);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn is_fnv1a_64() {
        assert_eq!(super::stable_id(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::stable_id(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
