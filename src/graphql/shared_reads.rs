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
//!   depends on it, for this caller ([`CALLER_FIELDS`]);
//! - the document's text, the operation's name and the variables.
//!
//! Only a query is shared, over HTTP, and never one that waits for an
//! answer ([`OWN_FIELDS`]). The execution runs as one of the callers it
//! answers, one whose token has its turn for a fleet-wide read free (SPEC
//! §9) when there is one: a token busy with reads of its own does not hold
//! the others back. An answer with an error is not shared (the error can be
//! the running caller's own): each request that waited for it runs on its
//! own instead. The execution is driven by the requests waiting for it and
//! stops when the last of them is gone, as a request's own would when its
//! client leaves. Every request is still authenticated, checked, counted
//! and traced as itself.

use std::collections::HashMap;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use async_graphql::Request;
use async_graphql::parser::types::{DocumentOperations, ExecutableDocument, Selection, SelectionSet};
use futures::future::{BoxFuture, FutureExt, Shared, WeakShared};

use crate::auth::{Permission, Principal};

/// Fields whose answer depends on the caller's name (the agent id), not
/// only on its fleet and permissions, with the permission without which it
/// does not: the caller itself (`me`, with the unit it holds), and what the
/// caller may do to a unit, which differs for its holder, and only a caller
/// that may claim is taken for one (`ledger::state_machine::next_actions`).
/// A document that selects one of them anywhere, from a caller with that
/// permission, is shared only among requests of the same name.
pub const CALLER_FIELDS: &[(&str, Option<Permission>)] =
    &[("me", None), ("legalActions", Some(Permission::UnitsClaim))];
/// Fields never shared: a wait for the answer to a question lasts up to a
/// minute, and a twin waiting out another's first would wait twice.
pub const OWN_FIELDS: &[&str] = &["waitForAnswer"];

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
    /// The key of `who`'s query `request`, whose document is `document`;
    /// `None` for a document that selects one of [`OWN_FIELDS`].
    pub fn of(who: &Principal, document: &ExecutableDocument, request: &Request) -> Option<Self> {
        if selects(document, OWN_FIELDS) {
            return None;
        }
        let by_name = CALLER_FIELDS
            .iter()
            .any(|(field, needs)| needs.is_none_or(|permission| who.has(permission)) && selects(document, &[field]));
        let mut permissions: Vec<&'static str> = who.permissions.iter().map(|p| p.as_str()).collect();
        permissions.sort_unstable();
        permissions.dedup();
        Some(Self {
            fleet: who.fleet.clone(),
            permissions,
            caller: by_name.then(|| who.name.clone()),
            query: request.query.clone(),
            operation: request.operation_name.clone(),
            variables: serde_json::to_string(&request.variables).ok()?,
        })
    }
}

/// Whether `document` selects one of `fields` anywhere (in any of its
/// operations and fragments, spread or not).
fn selects(document: &ExecutableDocument, fields: &[&str]) -> bool {
    fn within(set: &SelectionSet, fields: &[&str]) -> bool {
        set.items.iter().any(|item| match &item.node {
            Selection::Field(field) => {
                fields.contains(&field.node.name.node.as_str()) || within(&field.node.selection_set.node, fields)
            }
            Selection::InlineFragment(inline) => within(&inline.node.selection_set.node, fields),
            Selection::FragmentSpread(_) => false,
        })
    }
    let operations: Vec<_> = match &document.operations {
        DocumentOperations::Single(operation) => vec![operation],
        DocumentOperations::Multiple(operations) => operations.values().collect(),
    };
    operations.iter().any(|op| within(&op.node.selection_set.node, fields))
        || document.fragments.values().any(|fragment| within(&fragment.node.selection_set.node, fields))
}

/// The answer of one execution, as every request that waits for it gets
/// it. The execution is driven by whichever of them is polled, and dropped
/// (its statements cancelled) when every one of them is gone.
pub type Outcome<T> = Shared<BoxFuture<'static, Arc<T>>>;
type Weak<T> = WeakShared<BoxFuture<'static, Arc<T>>>;

/// The executions running and gathering, by key; `M` is what a request
/// brings to an execution (its caller: the execution runs as one of them).
pub struct Gate<K, T, M> {
    slots: Arc<Mutex<Slots<K, T, M>>>,
}

struct Slots<K, T, M> {
    by_key: HashMap<K, Slot<T, M>>,
    /// The id of the next execution.
    next: u64,
}

/// One key's execution running (its answer may be in already) and the
/// one gathering the requests that arrived since it started, with theirs.
struct Slot<T, M> {
    running: Option<(u64, Weak<T>)>,
    gathering: Option<(u64, Weak<T>, Vec<M>)>,
}

/// A request's turn: it leads a new execution, or joins the one gathering
/// and gets its own work back (to run alone when the answer it waited for
/// has an error).
pub enum Turn<T, W> {
    Leads(Outcome<T>),
    Joins(Outcome<T>, W),
}

impl<K, T, M> Default for Gate<K, T, M> {
    fn default() -> Self {
        Self { slots: Arc::new(Mutex::new(Slots { by_key: HashMap::new(), next: 0 })) }
    }
}

impl<K, T, M> Gate<K, T, M>
where
    K: Eq + Hash + Clone + Send + 'static,
    T: Send + Sync + 'static,
    M: Send + 'static,
{
    /// The turn of a request with `key`, which brings `member` and would
    /// run `work` with the members of its execution: it joins the execution
    /// gathering for the key, or leads one that starts at once (none is
    /// running) or after the running one (the requests arriving meanwhile
    /// join it, and it runs with all of their members).
    pub fn enter<W, F>(&self, key: K, member: M, work: W) -> Turn<T, W>
    where
        W: FnOnce(Vec<M>) -> F + Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.next += 1;
        let id = slots.next;
        let slot = slots.by_key.entry(key.clone()).or_insert(Slot { running: None, gathering: None });
        if let Some((_, weak, members)) = &mut slot.gathering
            && let Some(outcome) = weak.upgrade()
        {
            members.push(member);
            return Turn::Joins(outcome, work);
        }
        let done = Done { slots: self.slots.clone(), key, id };
        let after = slot.running.as_ref().and_then(|(_, weak)| weak.upgrade());
        // Started at once, it runs with its own member; gathering, with
        // the members of every request that joins it before it starts.
        let (own, gathered) = if after.is_some() { (None, Some(member)) } else { (Some(member), None) };
        let future = async move {
            if let Some(after) = after {
                // Only its end matters here: a panic in it (a bug, which
                // reached the requests that waited for it) is not this
                // execution's.
                let _ = AssertUnwindSafe(after).catch_unwind().await;
            }
            let members = done.start(own);
            let answer = Arc::new(work(members).await);
            drop(done);
            answer
        };
        let outcome = future.boxed().shared();
        if let Some(weak) = outcome.downgrade() {
            match gathered {
                Some(member) => slot.gathering = Some((id, weak, vec![member])),
                None => slot.running = Some((id, weak)),
            }
        }
        Turn::Leads(outcome)
    }

    /// Executions running or gathering.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).by_key.len()
    }
}
/// An execution's place in its slot, given up when it ends or is dropped.
struct Done<K: Eq + Hash, T, M> {
    slots: Arc<Mutex<Slots<K, T, M>>>,
    key: K,
    id: u64,
}

impl<K: Eq + Hash, T, M> Done<K, T, M> {
    /// The members the execution runs with: `own` for one that started at
    /// once; for one that gathered, the members that joined it, as it
    /// becomes the running one (the requests arriving from now on gather
    /// for the next).
    fn start(&self, own: Option<M>) -> Vec<M> {
        if let Some(own) = own {
            return vec![own];
        }
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let Some(slot) = slots.by_key.get_mut(&self.key) else { return Vec::new() };
        match slot.gathering.take() {
            Some((id, weak, members)) if id == self.id => {
                slot.running = Some((id, weak));
                members
            }
            other => {
                slot.gathering = other;
                Vec::new()
            }
        }
    }
}

impl<K: Eq + Hash, T, M> Drop for Done<K, T, M> {
    /// The execution leaves its slot, and the key is forgotten when nothing
    /// runs or gathers for it.
    fn drop(&mut self) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let Some(slot) = slots.by_key.get_mut(&self.key) else { return };
        if slot.running.as_ref().is_some_and(|(id, _)| *id == self.id) {
            slot.running = None;
        }
        if slot.gathering.as_ref().is_some_and(|(id, _, _)| *id == self.id) {
            slot.gathering = None;
        }
        if slot.running.is_none() && slot.gathering.is_none() {
            slots.by_key.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use tokio::sync::Notify;
    use tokio::task::JoinHandle;

    use super::*;

    type Answered = (usize, Vec<&'static str>);
    type Work = Box<dyn FnOnce(Vec<&'static str>) -> BoxFuture<'static, Answered> + Send>;

    /// Work that counts its runs and finishes when `release` is notified,
    /// answering with its run's number and its members.
    fn work(runs: &Arc<AtomicUsize>, release: &Arc<Notify>) -> Work {
        let (runs, release) = (runs.clone(), release.clone());
        Box::new(move |members| {
            async move {
                let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                release.notified().await;
                (run, members)
            }
            .boxed()
        })
    }

    /// A request waiting for its turn's answer (and driving it).
    fn wait(turn: Turn<Answered, Work>, leads: bool) -> JoinHandle<Arc<Answered>> {
        match turn {
            Turn::Leads(outcome) if leads => tokio::spawn(outcome),
            Turn::Joins(outcome, _) if !leads => tokio::spawn(outcome),
            _ => panic!("expected to {}", if leads { "lead" } else { "join" }),
        }
    }

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn requests_arriving_while_one_runs_share_the_next_execution_not_the_running_one() {
        let gate = Gate::default();
        let (runs, release) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        let first = wait(gate.enter("k", "a", work(&runs, &release)), true);
        settle().await;
        assert_eq!(runs.load(Ordering::SeqCst), 1, "a read with no twin in flight starts at once");
        // Arriving while the first runs: one leads the next execution, the
        // others join it; none joins the running one (its snapshot may be
        // older than they are).
        let second = wait(gate.enter("k", "b", work(&runs, &release)), true);
        let third = wait(gate.enter("k", "c", work(&runs, &release)), false);
        let fourth = wait(gate.enter("k", "d", work(&runs, &release)), false);
        settle().await;
        assert_eq!(runs.load(Ordering::SeqCst), 1, "the next execution waits for the running one");
        release.notify_one();
        assert_eq!(*first.await.expect("first"), (1, vec!["a"]));
        settle().await;
        assert_eq!(runs.load(Ordering::SeqCst), 2, "the gathered requests run once, after the first");
        // Arriving now, after the second started: a third execution.
        let fifth = wait(gate.enter("k", "e", work(&runs, &release)), true);
        release.notify_one();
        for waiter in [second, third, fourth] {
            assert_eq!(*waiter.await.expect("a gathered request"), (2, vec!["b", "c", "d"]), "with every member");
        }
        settle().await;
        release.notify_one();
        assert_eq!(*fifth.await.expect("fifth"), (3, vec!["e"]));
        settle().await;
        assert_eq!(gate.len(), 0, "a key with nothing running is forgotten");
    }

    #[tokio::test]
    async fn different_keys_never_wait_for_each_other() {
        let gate = Gate::default();
        let (runs, release) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        let a = wait(gate.enter("a", "a", work(&runs, &release)), true);
        let b = wait(gate.enter("b", "b", work(&runs, &release)), true);
        settle().await;
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        release.notify_waiters();
        assert_eq!(a.await.expect("a").1, ["a"]);
        assert_eq!(b.await.expect("b").1, ["b"]);
    }

    /// Sets its flag when dropped.
    struct Flag(Arc<AtomicBool>);

    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn an_execution_stops_when_every_request_waiting_for_it_is_gone() {
        let gate: Gate<&'static str, Answered, &'static str> = Gate::default();
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = Flag(dropped.clone());
        let never: Work = Box::new(move |_| {
            async move {
                let _flag = flag;
                std::future::pending::<Answered>().await
            }
            .boxed()
        });
        let (runs, release) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        let abandoned = wait(gate.enter("k", "a", never), true);
        let gathered = wait(gate.enter("k", "b", work(&runs, &release)), true);
        let joined = wait(gate.enter("k", "c", work(&runs, &release)), false);
        settle().await;
        // The gathered requests leave too: nothing waits for either.
        gathered.abort();
        joined.abort();
        abandoned.abort();
        settle().await;
        assert!(dropped.load(Ordering::SeqCst), "the abandoned execution was dropped");
        assert_eq!(runs.load(Ordering::SeqCst), 0, "the gathered one never started");
        assert_eq!(gate.len(), 0, "and the key is forgotten");
        // The next request starts at once.
        let next = wait(gate.enter("k", "d", work(&runs, &release)), true);
        settle().await;
        release.notify_one();
        assert_eq!(*next.await.expect("next"), (1, vec!["d"]));
    }

    #[tokio::test]
    async fn an_execution_that_panics_fails_its_own_requests_only() {
        let gate: Gate<&'static str, Answered, &'static str> = Gate::default();
        let panics: Work = Box::new(|_| async { panic!("a resolver's bug") }.boxed());
        let (runs, release) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        let failing = wait(gate.enter("k", "a", panics), true);
        let next = wait(gate.enter("k", "b", work(&runs, &release)), true);
        assert!(failing.await.is_err(), "the request that ran it fails");
        settle().await;
        release.notify_one();
        assert_eq!(*next.await.expect("the next execution runs"), (1, vec!["b"]));
        settle().await;
        assert_eq!(gate.len(), 0);
    }

    #[test]
    fn a_document_selects_a_field_through_fragments_and_other_operations() {
        let names = |query: &str| selects(&async_graphql::parser::parse_query(query).unwrap(), &["me", "legalActions"]);
        assert!(!names("{ throughput(bucket: DAY) { day verified } units { nodes { id } } }"));
        assert!(names("{ me { name } }"));
        assert!(names("{ units { nodes { legalActions } } }"));
        assert!(names("{ units { nodes { ...F } } } fragment F on WorkUnit { legalActions }"));
        assert!(names("{ units { nodes { ... on WorkUnit { legalActions } } } }"));
        assert!(names("query A { units { totalCount } } query B { me { name } }"));
        assert!(!selects(&async_graphql::parser::parse_query("{ me { name } }").unwrap(), OWN_FIELDS));
        assert!(selects(
            &async_graphql::parser::parse_query("{ waitForAnswer(unitId: \"u\") { id } }").unwrap(),
            OWN_FIELDS
        ));
    }
}
