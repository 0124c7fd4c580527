//! A feature value's place in the history's map: its distribution and its
//! encoded form, each made from the other when first needed.
//!
//! A restore would otherwise decode every feature value of a snapshot
//! (hundreds of thousands once the window is full: nearly all of a
//! restart's cost, growing with the state). It copies each value's bytes
//! instead, and a value is decoded when an estimate or a job first needs
//! it; a value untouched until it leaves the window is never decoded.
//! Going the other way, a value's encoding is kept until the value
//! changes: a snapshot writes again, as bytes, every value unchanged since
//! the one before (most of a whole snapshot), and encodes only the rest.
//! The bytes are this snapshot format's, written by this code and read
//! through RocksDB's block checksums: a value that does not decode is a
//! defect, not input, and stops the service.

use std::fmt;
use std::sync::OnceLock;

use foldhash::{HashMap, HashMapExt};
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_bytes::{ByteBuf, Bytes};

use super::{ValueForm, ValueHistory};
use crate::features::FeatureKind;

/// Small (56 bytes), since a restore makes hundreds of thousands: the
/// distribution is boxed. Locks rather than cells because evaluations
/// share one history between threads (`replay`). At least one of `value`
/// and `encoded` is set, and when both are they agree.
#[derive(Clone)]
pub(super) struct Slot {
    /// The distribution, once decoded (or learnt here).
    value: OnceLock<Box<ValueHistory>>,
    /// Its encoded form, once encoded (or restored), until it changes.
    encoded: OnceLock<Box<[u8]>>,
    /// When its newest job ended: what the periodic sweep for values that
    /// have left the window reads of each, kept here so that it reads
    /// neither the distribution nor its bytes.
    newest_end_us: Option<u64>,
}

impl Slot {
    pub(super) fn new(value: ValueHistory) -> Slot {
        Slot {
            newest_end_us: newest_end_us(&value),
            value: OnceLock::from(Box::new(value)),
            encoded: OnceLock::new(),
        }
    }

    /// The distribution; `utility_power` is the history's, from which a
    /// decoded sample's terms are computed.
    pub(super) fn get(&self, utility_power: f64) -> &ValueHistory {
        self.value.get_or_init(|| {
            let bytes = self.encoded.get().expect("a slot holds a value");
            match postcard::from_bytes::<ValueForm>(bytes) {
                Ok(form) => Box::new(form.into_value(utility_power)),
                Err(e) => panic!(
                    "a history value of {} bytes in the restored snapshot does not decode ({e}): \
                     the snapshot was not written by this jobcast",
                    bytes.len()
                ),
            }
        })
    }

    /// Change the distribution: its encoded form no longer holds.
    pub(super) fn update<R>(
        &mut self,
        utility_power: f64,
        change: impl FnOnce(&mut ValueHistory) -> R,
    ) -> R {
        self.get(utility_power);
        self.encoded.take();
        let value = self.value.get_mut().expect("decoded above");
        let result = change(value);
        self.newest_end_us = newest_end_us(value);
        result
    }

    pub(super) fn newest_end_us(&self) -> Option<u64> {
        self.newest_end_us
    }

    /// The encoded form, made now if the value changed since it last was.
    fn bytes(&self) -> &[u8] {
        self.encoded.get_or_init(|| {
            let value = self.value.get().expect("a slot holds a value");
            postcard::to_allocvec(value.as_ref())
                .expect("a distribution encodes")
                .into_boxed_slice()
        })
    }

    /// A copy holding only the encoded form (for the changes a snapshot
    /// writes), which stays cached here for the snapshots after.
    pub(super) fn encoded_copy(&self) -> Slot {
        Slot {
            value: OnceLock::new(),
            encoded: OnceLock::from(Box::from(self.bytes())),
            newest_end_us: self.newest_end_us,
        }
    }

    #[cfg(test)]
    pub(super) fn is_decoded(&self) -> bool {
        self.value.get().is_some()
    }
}

fn newest_end_us(value: &ValueHistory) -> Option<u64> {
    value.samples.back().map(|s| s.end_us)
}

/// The newest end and the encoded distribution: what a restore copies
/// without decoding.
impl Serialize for Slot {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (self.newest_end_us, Bytes::new(self.bytes())).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Slot {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (newest_end_us, bytes) = <(Option<u64>, ByteBuf)>::deserialize(deserializer)?;
        Ok(Slot {
            value: OnceLock::new(),
            encoded: OnceLock::from(bytes.into_vec().into_boxed_slice()),
            newest_end_us,
        })
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.value.get(), self.encoded.get()) {
            (Some(value), _) => value.fmt(f),
            (None, Some(bytes)) => write!(f, "<{} bytes, not decoded>", bytes.len()),
            (None, None) => f.write_str("<empty>"),
        }
    }
}

/// The history's map of slots, read straight into a map of the size it
/// was written with (up to a bound: the size is read from the snapshot).
pub(super) fn map<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<HashMap<(FeatureKind, u64), Slot>, D::Error> {
    struct Slots;
    impl<'de> Visitor<'de> for Slots {
        type Value = HashMap<(FeatureKind, u64), Slot>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of feature values to their distributions")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Self::Value, A::Error> {
            let mut map = HashMap::with_capacity(entries.size_hint().unwrap_or(0).min(1 << 22));
            while let Some((key, slot)) = entries.next_entry()? {
                map.insert(key, slot);
            }
            Ok(map)
        }
    }
    deserializer.deserialize_map(Slots)
}
