//! The gate identical reads meet at: per key, the execution running and the
//! one gathering the requests that arrived since it started, each driven by
//! the requests waiting for it (what shares a key: [`super`]). Generic over
//! the key, the answer and what a request brings.

use std::collections::HashMap;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures::future::{BoxFuture, FutureExt, Shared, WeakShared};
use tokio_util::sync::CancellationToken;

/// The answer of one execution, as every request that waits for it gets
/// it; `None` when the execution panicked (a bug: each request answers with
/// an internal error, and no waiter is left hanging). The execution is
/// driven by whichever of them is polled, and dropped (its statements
/// cancelled) when every one of them is gone.
pub type Outcome<T> = Shared<BoxFuture<'static, Option<Arc<T>>>>;
type Weak<T> = WeakShared<BoxFuture<'static, Option<Arc<T>>>>;

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

/// One key's execution running and the one gathering the requests that
/// arrived since it started, with theirs.
struct Slot<T, M> {
    running: Option<Execution<T>>,
    gathering: Option<(Execution<T>, Vec<M>)>,
}

/// An execution as its slot knows it: a handle that does not keep it
/// alive, and the signal of its end (answered, or dropped with its last
/// waiter), which the next one waits for without keeping it alive either.
struct Execution<T> {
    id: u64,
    outcome: Weak<T>,
    ended: CancellationToken,
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
        if let Some((gathering, members)) = &mut slot.gathering
            && let Some(outcome) = gathering.outcome.upgrade()
        {
            members.push(member);
            return Turn::Joins(outcome, work);
        }
        let ended = CancellationToken::new();
        let done = Done { slots: self.slots.clone(), key, id, ended: ended.clone() };
        let after = slot.running.as_ref().map(|running| running.ended.clone());
        // Started at once, it runs with its own member; gathering, with
        // the members of every request that joins it before it starts.
        let (own, gathered) = if after.is_some() { (None, Some(member)) } else { (Some(member), None) };
        let future = async move {
            if let Some(after) = after {
                after.cancelled().await;
            }
            let members = done.start(own);
            let answer = AssertUnwindSafe(async move { work(members).await }).catch_unwind().await;
            drop(done);
            answer.ok().map(Arc::new)
        };
        let outcome = future.boxed().shared();
        if let Some(weak) = outcome.downgrade() {
            let execution = Execution { id, outcome: weak, ended };
            match gathered {
                Some(member) => slot.gathering = Some((execution, vec![member])),
                None => slot.running = Some(execution),
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
/// An execution's place in its slot, given up when it ends or is dropped,
/// with the signal of its end.
struct Done<K: Eq + Hash, T, M> {
    slots: Arc<Mutex<Slots<K, T, M>>>,
    key: K,
    id: u64,
    ended: CancellationToken,
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
            Some((execution, members)) if execution.id == self.id => {
                slot.running = Some(execution);
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
    /// The execution leaves its slot (the key is forgotten when nothing
    /// runs or gathers for it) and signals its end.
    fn drop(&mut self) {
        {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(slot) = slots.by_key.get_mut(&self.key) {
                if slot.running.as_ref().is_some_and(|running| running.id == self.id) {
                    slot.running = None;
                }
                if slot.gathering.as_ref().is_some_and(|(gathering, _)| gathering.id == self.id) {
                    slot.gathering = None;
                }
                if slot.running.is_none() && slot.gathering.is_none() {
                    slots.by_key.remove(&self.key);
                }
            }
        }
        self.ended.cancel();
    }
}
#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

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

    /// Work that never ends and sets `dropped` when it is dropped.
    fn endless(dropped: &Arc<AtomicBool>) -> Work {
        let flag = Flag(dropped.clone());
        Box::new(move |_| {
            async move {
                let _flag = flag;
                std::future::pending::<Answered>().await
            }
            .boxed()
        })
    }

    /// Sets its flag when dropped.
    struct Flag(Arc<AtomicBool>);

    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// A request waiting for its turn's answer (and driving it).
    fn wait(turn: Turn<Answered, Work>, leads: bool) -> JoinHandle<Option<Arc<Answered>>> {
        match turn {
            Turn::Leads(outcome) if leads => tokio::spawn(outcome),
            Turn::Joins(outcome, _) if !leads => tokio::spawn(outcome),
            _ => panic!("expected to {}", if leads { "lead" } else { "join" }),
        }
    }

    async fn answer(waiter: JoinHandle<Option<Arc<Answered>>>) -> Answered {
        let answer = waiter.await.expect("the waiter's task").expect("an answer");
        (*answer).clone()
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
        assert_eq!(answer(first).await, (1, vec!["a"]));
        settle().await;
        assert_eq!(runs.load(Ordering::SeqCst), 2, "the gathered requests run once, after the first");
        // Arriving now, after the second started: a third execution.
        let fifth = wait(gate.enter("k", "e", work(&runs, &release)), true);
        release.notify_one();
        for waiter in [second, third, fourth] {
            assert_eq!(answer(waiter).await, (2, vec!["b", "c", "d"]), "with every member");
        }
        settle().await;
        release.notify_one();
        assert_eq!(answer(fifth).await, (3, vec!["e"]));
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
        assert_eq!(answer(a).await.1, ["a"]);
        assert_eq!(answer(b).await.1, ["b"]);
    }

    #[tokio::test]
    async fn an_execution_stops_when_every_request_waiting_for_it_is_gone() {
        let gate: Gate<&'static str, Answered, &'static str> = Gate::default();
        let dropped = Arc::new(AtomicBool::new(false));
        let (runs, release) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        let abandoned = wait(gate.enter("k", "a", endless(&dropped)), true);
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
        assert_eq!(answer(next).await, (1, vec!["d"]));
    }

    #[tokio::test]
    async fn the_next_execution_does_not_keep_an_abandoned_one_running() {
        let gate: Gate<&'static str, Answered, &'static str> = Gate::default();
        let dropped = Arc::new(AtomicBool::new(false));
        let (runs, release) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        let abandoned = wait(gate.enter("k", "a", endless(&dropped)), true);
        let gathered = wait(gate.enter("k", "b", work(&runs, &release)), true);
        settle().await;
        // The running one's only request leaves; the gathered one waits on.
        abandoned.abort();
        settle().await;
        assert!(dropped.load(Ordering::SeqCst), "the abandoned execution was dropped");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "and the gathered one started");
        release.notify_one();
        assert_eq!(answer(gathered).await, (1, vec!["b"]));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_execution_that_panics_answers_every_request_waiting_for_it_and_the_next_one_runs() {
        let within = Duration::from_secs(5);
        for _ in 0..200 {
            let gate: Gate<&'static str, Answered, &'static str> = Gate::default();
            let (runs, release) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
            let panics: Work = Box::new(|_| async { panic!("a resolver's bug") }.boxed());
            let first = wait(gate.enter("k", "a", work(&runs, &release)), true);
            // Gathered behind the first, on both threads: the one that leads
            // the panicking execution and three that join it.
            let failing = wait(gate.enter("k", "b", panics), true);
            let joined: Vec<_> = ["c", "d", "e"].map(|m| wait(gate.enter("k", m, work(&runs, &release)), false)).into();
            release.notify_one();
            assert_eq!(tokio::time::timeout(within, answer(first)).await.expect("answered"), (1, vec!["a"]));
            for waiter in joined.into_iter().chain([failing]) {
                let outcome = tokio::time::timeout(within, waiter).await.expect("answered, not left hanging");
                assert!(outcome.expect("the waiter's task").is_none(), "a panic answers None");
            }
            let next = wait(gate.enter("k", "f", work(&runs, &release)), true);
            release.notify_one();
            assert_eq!(tokio::time::timeout(within, answer(next)).await.expect("the next one runs"), (2, vec!["f"]));
        }
    }
}
