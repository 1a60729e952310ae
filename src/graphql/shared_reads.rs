//! Identical reads sent together run once (issue 27).
//!
//! Dashboards refresh together: sixteen operators' panels send the same
//! document with the same variables within milliseconds, and on two cores
//! sixteen executions of a 2,920-row `throughput` queue for each other
//! (docs/BENCHMARKS.md). A query whose [`Key`] matches one already
//! running waits for that one to finish; every request that arrived
//! meanwhile is then answered by one execution, which starts after the last
//! of them arrived. Its snapshot is taken after each of their arrivals, so
//! every request still sees every write committed before it was sent, as if
//! it had run alone a moment later; none is answered from a snapshot older
//! than itself. A read with no twin in flight starts at once.
//!
//! What an answer may depend on is in its key:
//! - the caller's fleet (row-level security and every read's scope) and
//!   permissions (`FORBIDDEN`, `legalActions`);
//! - the caller's name when the document selects a field whose answer
//!   depends on it ([`CALLER_FIELDS`]);
//! - the document's text, the operation's name and the variables.
//!
//! Only a query is shared, over HTTP, and only an answer without errors: an
//! error can be the running request's own (its token's turn for a
//! fleet-wide read, SPEC §9), so each request that waited for such an
//! answer runs on its own instead. Every request is still authenticated,
//! checked, counted and traced as itself.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use async_graphql::Request;
use async_graphql::parser::types::{DocumentOperations, ExecutableDocument, Selection, SelectionSet};
use futures::future::{BoxFuture, FutureExt, Shared};
use tokio::sync::oneshot;

use crate::auth::Principal;

/// Fields whose answer depends on the caller's name (the agent id), not
/// only on its fleet and permissions: the caller itself (`me`), what the
/// caller may do to a unit (its holder may do more) and a wait for the
/// answer to the caller's question. A document that selects one of them
/// anywhere is shared only among requests of the same name.
pub const CALLER_FIELDS: &[&str] = &["me", "legalActions", "waitForAnswer"];

/// What decides a query's answer (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    fleet: String,
    permissions: Vec<&'static str>,
    /// The caller's name, for a document that selects one of [`CALLER_FIELDS`].
    caller: Option<String>,
    query: String,
    operation: Option<String>,
    variables: String,
}

impl Key {
    /// The key of `who`'s query `request`, whose document selects one of
    /// [`CALLER_FIELDS`] when `names_the_caller`.
    pub fn of(who: &Principal, names_the_caller: bool, request: &Request) -> Option<Self> {
        let mut permissions: Vec<&'static str> = who.permissions.iter().map(|p| p.as_str()).collect();
        permissions.sort_unstable();
        permissions.dedup();
        Some(Self {
            fleet: who.fleet.clone(),
            permissions,
            caller: names_the_caller.then(|| who.name.clone()),
            query: request.query.clone(),
            operation: request.operation_name.clone(),
            variables: serde_json::to_string(&request.variables).ok()?,
        })
    }
}

/// Whether `document` selects one of [`CALLER_FIELDS`] anywhere (in any of
/// its operations and fragments, spread or not).
pub fn names_the_caller(document: &ExecutableDocument) -> bool {
    fn selects(set: &SelectionSet) -> bool {
        set.items.iter().any(|item| match &item.node {
            Selection::Field(field) => {
                CALLER_FIELDS.contains(&field.node.name.node.as_str()) || selects(&field.node.selection_set.node)
            }
            Selection::InlineFragment(inline) => selects(&inline.node.selection_set.node),
            Selection::FragmentSpread(_) => false,
        })
    }
    let operations: Vec<_> = match &document.operations {
        DocumentOperations::Single(operation) => vec![operation],
        DocumentOperations::Multiple(operations) => operations.values().collect(),
    };
    operations.iter().any(|op| selects(&op.node.selection_set.node))
        || document.fragments.values().any(|fragment| selects(&fragment.node.selection_set.node))
}

/// The answer of one execution, as every request that waited for it gets
/// it: `None` when the execution ended without one (it panicked).
pub type Outcome<T> = Shared<BoxFuture<'static, Option<Arc<T>>>>;

/// The executions running and gathering, by key.
pub struct Gate<K, T> {
    slots: Arc<Mutex<Slots<K, T>>>,
}

struct Slots<K, T> {
    by_key: HashMap<K, Slot<T>>,
    /// The id of the next execution.
    next: u64,
}

/// One key's execution running (its answer may be in already) and the
/// one gathering the requests that arrived since it started.
struct Slot<T> {
    running: Option<(u64, Outcome<T>)>,
    gathering: Option<(u64, Outcome<T>)>,
}

/// A request's turn: it joins the execution gathering, or leads a new one.
pub enum Turn<K, T> {
    Joins(Outcome<T>),
    Leads(Lead<K, T>),
}

/// A new execution: [`Lead::run`] starts it, after the key's running one.
pub struct Lead<K, T> {
    slots: Arc<Mutex<Slots<K, T>>>,
    key: K,
    id: u64,
    after: Option<Outcome<T>>,
    answer: oneshot::Sender<Arc<T>>,
    outcome: Outcome<T>,
}

impl<K, T> Default for Gate<K, T> {
    fn default() -> Self {
        Self { slots: Arc::new(Mutex::new(Slots { by_key: HashMap::new(), next: 0 })) }
    }
}

impl<K: Eq + Hash + Clone + Send + 'static, T: Send + Sync + 'static> Gate<K, T> {
    /// The turn of a request with `key`: joins the execution gathering for
    /// it, or leads one that starts at once (none is running) or after the
    /// running one (the requests arriving meanwhile join it).
    pub fn enter(&self, key: K) -> Turn<K, T> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.next += 1;
        let id = slots.next;
        let slot = slots.by_key.entry(key.clone()).or_insert(Slot { running: None, gathering: None });
        if let Some((_, gathering)) = &slot.gathering {
            return Turn::Joins(gathering.clone());
        }
        let (answer, received) = oneshot::channel();
        let outcome = received.map(Result::ok).boxed().shared();
        let after = slot.running.as_ref().map(|(_, running)| running.clone());
        if after.is_some() {
            slot.gathering = Some((id, outcome.clone()));
        } else {
            slot.running = Some((id, outcome.clone()));
        }
        Turn::Leads(Lead { slots: self.slots.clone(), key, id, after, answer, outcome })
    }

    /// Executions running or gathering.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).by_key.len()
    }
}

impl<K: Eq + Hash + Clone + Send + 'static, T: Send + Sync + 'static> Lead<K, T> {
    /// Runs `work` (on a task of its own: the requests waiting for it do
    /// not depend on the leading one staying connected) once the key's
    /// running execution has finished, stopping the gathering as it starts.
    pub fn run(self, work: impl Future<Output = T> + Send + 'static) -> Outcome<T> {
        let Lead { slots, key, id, after, answer, outcome } = self;
        tokio::spawn(async move {
            let done = Done { slots, key, id };
            if let Some(after) = after {
                after.await;
                done.start();
            }
            let _ = answer.send(Arc::new(work.await));
        });
        outcome
    }
}

/// An execution's place in its slot, given up when it ends (also when its
/// work panics).
struct Done<K: Eq + Hash, T> {
    slots: Arc<Mutex<Slots<K, T>>>,
    key: K,
    id: u64,
}

impl<K: Eq + Hash, T> Done<K, T> {
    /// The gathering execution becomes the running one: the requests
    /// arriving from now on gather for the next.
    fn start(&self) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = slots.by_key.get_mut(&self.key)
            && slot.gathering.as_ref().is_some_and(|(id, _)| *id == self.id)
        {
            slot.running = slot.gathering.take();
        }
    }
}

impl<K: Eq + Hash, T> Drop for Done<K, T> {
    /// The key is forgotten when its running execution ends with none
    /// gathering (one gathering starts when this one's answer is in).
    fn drop(&mut self) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = slots.by_key.get(&self.key)
            && slot.running.as_ref().is_some_and(|(id, _)| *id == self.id)
            && slot.gathering.is_none()
        {
            slots.by_key.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::sync::Notify;

    use super::*;

    /// Work that counts its runs and finishes when `release` is notified,
    /// answering with its run's number.
    fn work(runs: &Arc<AtomicUsize>, release: &Arc<Notify>) -> impl Future<Output = usize> + Send + 'static {
        let (runs, release) = (runs.clone(), release.clone());
        async move {
            let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
            release.notified().await;
            run
        }
    }

    fn lead(turn: Turn<&'static str, usize>, runs: &Arc<AtomicUsize>, release: &Arc<Notify>) -> Outcome<usize> {
        match turn {
            Turn::Leads(lead) => lead.run(work(runs, release)),
            Turn::Joins(_) => panic!("expected to lead"),
        }
    }

    fn joined(turn: Turn<&'static str, usize>) -> Outcome<usize> {
        match turn {
            Turn::Joins(outcome) => outcome,
            Turn::Leads(_) => panic!("expected to join"),
        }
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn requests_arriving_while_one_runs_share_the_next_execution_not_the_running_one() {
        let gate = Gate::default();
        let (runs, release) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        let first = lead(gate.enter("k"), &runs, &release);
        settle().await;
        assert_eq!(runs.load(Ordering::SeqCst), 1, "a read with no twin in flight starts at once");
        // Arriving while the first runs: one leads the next execution, the
        // others join it; none joins the running one (its snapshot may be
        // older than they are).
        let second = lead(gate.enter("k"), &runs, &release);
        let third = joined(gate.enter("k"));
        let fourth = joined(gate.enter("k"));
        settle().await;
        assert_eq!(runs.load(Ordering::SeqCst), 1, "the next execution waits for the running one");
        release.notify_one();
        assert_eq!(first.await.as_deref(), Some(&1));
        settle().await;
        assert_eq!(runs.load(Ordering::SeqCst), 2, "the gathered requests run once, after the first");
        // Arriving now, after the second started: a third execution.
        let fifth = lead(gate.enter("k"), &runs, &release);
        release.notify_one();
        for outcome in [second, third, fourth] {
            assert_eq!(outcome.await.as_deref(), Some(&2));
        }
        settle().await;
        release.notify_one();
        assert_eq!(fifth.await.as_deref(), Some(&3));
        settle().await;
        assert_eq!(gate.len(), 0, "a key with nothing running is forgotten");
    }

    #[tokio::test]
    async fn different_keys_never_wait_for_each_other() {
        let gate = Gate::default();
        let (runs, release) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        let a = lead(gate.enter("a"), &runs, &release);
        let b = lead(gate.enter("b"), &runs, &release);
        settle().await;
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        release.notify_waiters();
        assert!(a.await.is_some() && b.await.is_some());
    }

    #[tokio::test]
    async fn an_execution_that_panics_answers_none_and_the_next_one_still_runs() {
        let gate: Gate<&'static str, usize> = Gate::default();
        let failing = match gate.enter("k") {
            Turn::Leads(lead) => lead.run(async { panic!("the work failed") }),
            Turn::Joins(_) => panic!("expected to lead"),
        };
        let (runs, release) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        let next = lead(gate.enter("k"), &runs, &release);
        assert_eq!(failing.await, None);
        settle().await;
        release.notify_one();
        assert_eq!(next.await.as_deref(), Some(&1));
        settle().await;
        assert_eq!(gate.len(), 0);
    }

    #[test]
    fn a_document_names_the_caller_through_fields_fragments_and_other_operations() {
        let names = |query: &str| names_the_caller(&async_graphql::parser::parse_query(query).unwrap());
        assert!(!names("{ throughput(bucket: DAY) { day verified } units { nodes { id } } }"));
        assert!(names("{ me { name } }"));
        assert!(names("{ units { nodes { legalActions } } }"));
        assert!(names("{ units { nodes { ...F } } } fragment F on WorkUnit { legalActions }"));
        assert!(names("{ units { nodes { ... on WorkUnit { legalActions } } } }"));
        assert!(names("query A { units { totalCount } } query B { me { name } }"));
    }
}
