//! One read per event and process instead of one per subscriber: when a
//! fleet's event reaches its N subscribers, a payload that needs a row the
//! event does not carry (the question a `blocked` event opened, the attempt
//! a `stalled` event names) is read once, by the first of them, and shared.
//! Keys carry the fleet, so a subscriber only ever meets rows its own fleet's
//! read produced. The newest [`CAPACITY`] keys are kept: an event's
//! subscribers take it within moments of each other, and one that comes
//! later reads for itself.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

pub const CAPACITY: usize = 4096;

pub struct Memo<K, V> {
    entries: Mutex<Entries<K, V>>,
    capacity: usize,
}

struct Entries<K, V> {
    cells: HashMap<K, Arc<OnceCell<V>>>,
    order: VecDeque<K>,
}

impl<K: Hash + Eq + Clone, V: Clone> Default for Memo<K, V> {
    fn default() -> Self {
        Self::with_capacity(CAPACITY)
    }
}

impl<K: Hash + Eq + Clone, V: Clone> Memo<K, V> {
    /// Keeps the newest `capacity` keys.
    pub fn with_capacity(capacity: usize) -> Self {
        Self { entries: Mutex::new(Entries { cells: HashMap::new(), order: VecDeque::new() }), capacity }
    }

    /// The value for `key`: read by `read` once, while others asking for the
    /// same key wait for that read. A failed read is not kept (the next
    /// caller reads again).
    pub async fn get_or_read<E, F, Fut>(&self, key: K, read: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        let cell = {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            match entries.cells.get(&key) {
                Some(cell) => cell.clone(),
                None => {
                    let cell = Arc::new(OnceCell::new());
                    entries.cells.insert(key.clone(), cell.clone());
                    entries.order.push_back(key);
                    while entries.order.len() > self.capacity {
                        if let Some(old) = entries.order.pop_front() {
                            entries.cells.remove(&old);
                        }
                    }
                    cell
                }
            }
        };
        cell.get_or_try_init(read).await.cloned()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn one_read_per_key_and_failures_are_not_kept() {
        let memo: Memo<u32, u32> = Memo::default();
        let reads = AtomicUsize::new(0);
        let read = || async {
            reads.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ()>(7)
        };
        let (a, b) = tokio::join!(memo.get_or_read(1, read), memo.get_or_read(1, read));
        assert_eq!((a, b), (Ok(7), Ok(7)));
        assert_eq!(reads.load(Ordering::SeqCst), 1);

        assert_eq!(memo.get_or_read(2, || async { Err::<u32, _>("down") }).await, Err("down"));
        assert_eq!(memo.get_or_read(2, || async { Ok::<_, &str>(8) }).await, Ok(8));
    }

    #[tokio::test]
    async fn only_the_newest_keys_are_kept() {
        let memo: Memo<usize, usize> = Memo::default();
        for k in 0..=CAPACITY {
            memo.get_or_read(k, || async move { Ok::<_, ()>(k) }).await.ok();
        }
        // Key 0 was evicted: it is read again.
        assert_eq!(memo.get_or_read(0, || async { Ok::<_, ()>(99) }).await, Ok(99));
        assert_eq!(memo.get_or_read(CAPACITY, || async { Ok::<_, ()>(99) }).await, Ok(CAPACITY));
    }
}
