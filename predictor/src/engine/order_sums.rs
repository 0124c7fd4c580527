//! An ordered set whose sums of everything before a key cost O(log n):
//! the ETA's terms of the live jobs with no task running, by queue order.
//! An ETA adds the work and width of every job ahead of its own; a job
//! with no task running adds the same at any time ([`Ahead::of`]), so
//! those jobs (a deep queue's thousands) are summed here once, as they
//! change, and an ETA asks for the sum before its job's place instead of
//! walking them.
//!
//! A treap: a binary search tree by key that is a heap by a priority
//! drawn for each node, which keeps it balanced (expected depth
//! O(log n)) whatever order the keys come in; each node also holds the
//! sum of its subtree. The priorities come from a fixed sequence, so the
//! same operations build the same tree; the sums are integers, so any
//! tree gives the same ones.

use crate::eta::Ahead;

/// No node.
const NIL: u32 = u32::MAX;

#[derive(Debug)]
pub(super) struct OrderSums<K> {
    nodes: Vec<Node<K>>,
    /// Slots of `nodes` removed, for the next insertions.
    free: Vec<u32>,
    root: u32,
    /// The state of the priorities' sequence (SplitMix64).
    drawn: u64,
}

#[derive(Debug)]
struct Node<K> {
    key: K,
    own: Ahead,
    /// `own` plus its subtrees' sums.
    sum: Ahead,
    priority: u64,
    left: u32,
    right: u32,
}

impl<K> Default for OrderSums<K> {
    fn default() -> Self {
        OrderSums {
            nodes: Vec::new(),
            free: Vec::new(),
            root: NIL,
            drawn: 0,
        }
    }
}

impl<K: Ord + Copy> OrderSums<K> {
    /// Add `key` (which must not be in the set) with what it adds to the
    /// sums.
    pub(super) fn insert(&mut self, key: K, own: Ahead) {
        let node = Node {
            key,
            own,
            sum: own,
            priority: self.draw(),
            left: NIL,
            right: NIL,
        };
        let at = match self.free.pop() {
            Some(at) => {
                self.nodes[at as usize] = node;
                at
            }
            None => {
                self.nodes.push(node);
                u32::try_from(self.nodes.len() - 1).expect("fewer than 2^32 live jobs")
            }
        };
        let (before, after) = self.split(self.root, &key, false);
        let before = self.merge(before, at);
        self.root = self.merge(before, after);
    }

    /// Take `key` out; whether it was in the set.
    pub(super) fn remove(&mut self, key: &K) -> bool {
        let (before, rest) = self.split(self.root, key, false);
        let (found, after) = self.split(rest, key, true);
        self.root = self.merge(before, after);
        if found == NIL {
            return false;
        }
        self.free.push(found);
        true
    }

    /// The sum of what every key below `key` adds.
    pub(super) fn sum_before(&self, key: &K) -> Ahead {
        let mut sum = Ahead::default();
        let mut at = self.root;
        while at != NIL {
            let node = &self.nodes[at as usize];
            if node.key < *key {
                sum.add(self.sum(node.left));
                sum.add(node.own);
                at = node.right;
            } else {
                at = node.left;
            }
        }
        sum
    }

    /// Every key, in order.
    #[cfg(test)]
    pub(super) fn keys(&self) -> Vec<K> {
        let mut out = Vec::new();
        let mut stack = Vec::new();
        let mut at = self.root;
        while at != NIL || !stack.is_empty() {
            while at != NIL {
                stack.push(at);
                at = self.nodes[at as usize].left;
            }
            let node = &self.nodes[stack.pop().expect("not empty") as usize];
            out.push(node.key);
            at = node.right;
        }
        out
    }

    fn draw(&mut self) -> u64 {
        self.drawn = self.drawn.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.drawn;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn sum(&self, at: u32) -> Ahead {
        if at == NIL {
            Ahead::default()
        } else {
            self.nodes[at as usize].sum
        }
    }

    fn update(&mut self, at: u32) {
        let node = &self.nodes[at as usize];
        let mut sum = node.own;
        sum.add(self.sum(node.left));
        sum.add(self.sum(node.right));
        self.nodes[at as usize].sum = sum;
    }

    /// The tree at `at` as two: the keys below `key` (or up to it, with
    /// `inclusive`), and the rest.
    fn split(&mut self, at: u32, key: &K, inclusive: bool) -> (u32, u32) {
        if at == NIL {
            return (NIL, NIL);
        }
        let node_key = self.nodes[at as usize].key;
        if node_key < *key || (inclusive && node_key == *key) {
            let right = self.nodes[at as usize].right;
            let (low, high) = self.split(right, key, inclusive);
            self.nodes[at as usize].right = low;
            self.update(at);
            (at, high)
        } else {
            let left = self.nodes[at as usize].left;
            let (low, high) = self.split(left, key, inclusive);
            self.nodes[at as usize].left = high;
            self.update(at);
            (low, at)
        }
    }

    /// One tree of `low` and `high`, every key of `low` below `high`'s.
    fn merge(&mut self, low: u32, high: u32) -> u32 {
        if low == NIL {
            return high;
        }
        if high == NIL {
            return low;
        }
        if self.nodes[low as usize].priority > self.nodes[high as usize].priority {
            let right = self.nodes[low as usize].right;
            self.nodes[low as usize].right = self.merge(right, high);
            self.update(low);
            low
        } else {
            let left = self.nodes[high as usize].left;
            self.nodes[high as usize].left = self.merge(low, left);
            self.update(high);
            high
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn ahead(n: u64) -> Ahead {
        Ahead {
            work: u128::from(n) * 3,
            width: u128::from(n),
        }
    }

    proptest! {
        /// Against a map summed key by key: the same keys in the same
        /// order, and the same sum before any key, after any inserts and
        /// removes.
        #[test]
        fn sums_before_a_key_are_those_of_every_key_below(
            ops in prop::collection::vec((any::<bool>(), 0u64..200, 0u64..1000), 1..400),
            probes in prop::collection::vec(0u64..210, 1..20),
        ) {
            let mut tree = OrderSums::default();
            let mut naive = BTreeMap::new();
            for (insert, key, value) in ops {
                if insert && !naive.contains_key(&key) {
                    tree.insert(key, ahead(value));
                    naive.insert(key, value);
                } else if !insert {
                    prop_assert_eq!(tree.remove(&key), naive.remove(&key).is_some());
                }
            }
            prop_assert_eq!(tree.keys(), naive.keys().copied().collect::<Vec<_>>());
            for probe in probes {
                let mut expected = Ahead::default();
                for &value in naive.range(..probe).map(|(_, v)| v) {
                    expected.add(ahead(value));
                }
                prop_assert_eq!(tree.sum_before(&probe), expected);
            }
        }
    }

    #[test]
    fn ten_thousand_keys_in_order_keep_the_tree_shallow() {
        let mut tree = OrderSums::default();
        for key in 0..10_000u64 {
            tree.insert(key, ahead(1));
        }
        fn depth<K>(tree: &OrderSums<K>, at: u32) -> usize {
            if at == NIL {
                return 0;
            }
            let node = &tree.nodes[at as usize];
            1 + depth(tree, node.left).max(depth(tree, node.right))
        }
        // log2(10,000) is 13.3; a treap's expected depth about 2.4 times it.
        let d = depth(&tree, tree.root);
        assert!(d < 50, "depth {d}");
        assert_eq!(tree.sum_before(&5_000), ahead(5_000));
    }
}
