//! Ids minted by brokers: [`JobId`] and [`LeaseId`], and maps keyed by them.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

use serde::Serialize;

/// A job's id, unique within one broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct JobId(pub i64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The claim one fetch holds on every job it returned.
///
/// Settling or renewing names the lease; once a lease has expired and its jobs went back to
/// their queue, a settlement naming it changes nothing (fencing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct LeaseId(pub i64);

impl LeaseId {
    /// A fresh random lease id. Random rather than sequential so that several processes
    /// sharing one store never mint the same id without coordinating.
    pub fn random() -> Self {
        LeaseId(fastrand::i64(1..i64::MAX))
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Hashes a [`JobId`] or [`LeaseId`] with one multiplication instead of SipHash. Ids are
/// minted by a broker (sequential or random), never chosen by a caller, so the flooding
/// SipHash guards against cannot happen, and maps keyed by them sit on per-job paths.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_i64(&mut self, n: i64) {
        self.write_u64(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing (FxHash's step): an odd multiplier spreads sequential ids over
        // both the low bits (the bucket) and the high bits (the tag) of the hash.
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

/// A map keyed by job or lease ids.
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
/// A set of job or lease ids.
pub(crate) type IdSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;
