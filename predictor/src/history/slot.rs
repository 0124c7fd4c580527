//! A feature value's place in the history's map: its distribution, decoded
//! on first use.
//!
//! A restore would otherwise decode every feature value of a snapshot
//! (hundreds of thousands once the window is full: nearly all of a
//! restart's cost, growing with the state). It copies each value's bytes
//! instead, and a value is decoded when an estimate or a job first needs
//! it; a value untouched until it leaves the window is never decoded, and
//! one only read is written to the next snapshot as the bytes it came in.
//! The bytes are this snapshot format's, written by this code and read
//! through RocksDB's block checksums: a value that does not decode is a
//! defect, not input, and stops the service naming the value.

use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{ValueForm, ValueHistory};

#[derive(Clone)]
pub(super) struct Slot {
    /// The distribution, once decoded (or learnt here).
    value: OnceLock<ValueHistory>,
    /// Its encoded form while that is still what `value` holds: until a
    /// change, after which it is dropped.
    encoded: Option<Encoded>,
}

#[derive(Clone)]
struct Encoded {
    bytes: Box<[u8]>,
    /// When its newest job ended, which the sweep for values that have
    /// left the window reads without decoding.
    newest_end_us: Option<u64>,
}

impl Slot {
    pub(super) fn new(value: ValueHistory) -> Slot {
        Slot {
            value: OnceLock::from(value),
            encoded: None,
        }
    }

    /// The distribution; `utility_power` is the history's, from which a
    /// decoded sample's terms are computed.
    pub(super) fn get(&self, utility_power: f64) -> &ValueHistory {
        self.value.get_or_init(|| {
            let encoded = self.encoded.as_ref().expect("a slot holds a value");
            match postcard::from_bytes::<ValueForm>(&encoded.bytes) {
                Ok(form) => form.into_value(utility_power),
                Err(e) => panic!(
                    "a history value of {} bytes in the restored snapshot does not decode ({e}): \
                     the snapshot was not written by this jobcast",
                    encoded.bytes.len()
                ),
            }
        })
    }

    /// The distribution, to change: its encoded form no longer holds.
    pub(super) fn get_mut(&mut self, utility_power: f64) -> &mut ValueHistory {
        self.get(utility_power);
        self.encoded = None;
        self.value.get_mut().expect("decoded above")
    }

    pub(super) fn newest_end_us(&self) -> Option<u64> {
        match (self.value.get(), &self.encoded) {
            (Some(value), _) => value.samples.back().map(|s| s.end_us),
            (None, Some(encoded)) => encoded.newest_end_us,
            (None, None) => unreachable!("a slot holds a value"),
        }
    }

    #[cfg(test)]
    pub(super) fn is_decoded(&self) -> bool {
        self.value.get().is_some()
    }

    fn bytes(&self) -> Cow<'_, [u8]> {
        match &self.encoded {
            Some(encoded) => Cow::Borrowed(&encoded.bytes),
            None => Cow::Owned(
                postcard::to_allocvec(self.value.get().expect("a slot holds a value"))
                    .expect("a distribution encodes"),
            ),
        }
    }
}

/// The newest end and the encoded distribution: what a restore copies
/// without decoding.
impl Serialize for Slot {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let bytes = self.bytes();
        (self.newest_end_us(), serde_bytes::Bytes::new(&bytes)).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Slot {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (newest_end_us, bytes) =
            <(Option<u64>, serde_bytes::ByteBuf)>::deserialize(deserializer)?;
        Ok(Slot {
            value: OnceLock::new(),
            encoded: Some(Encoded {
                bytes: bytes.into_vec().into_boxed_slice(),
                newest_end_us,
            }),
        })
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.value.get(), &self.encoded) {
            (Some(value), _) => value.fmt(f),
            (None, Some(encoded)) => write!(f, "<{} bytes, not decoded>", encoded.bytes.len()),
            (None, None) => f.write_str("<empty>"),
        }
    }
}
