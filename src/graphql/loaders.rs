//! One DataLoader per request, batching every relation of SPEC §4 (unit →
//! attempts, current attempt, questions and open question, events; attempt,
//! event and question → unit) into one statement per relation per level of
//! the query, whatever the number of parents.

use std::collections::HashMap;
use std::sync::OnceLock;

use async_graphql::Context;
use async_graphql::dataloader::{DataLoader, HashMapCache, Loader};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::auth::Principal;
use crate::db::entities::{QuestionStatus, attempt, event, question, work_unit};
use crate::db::reads::{AttemptEndRow, DisposalRow, group_by};
use crate::ledger::Ledger;
use crate::ledger::cursor::Cursor;

/// Prepares the nested relations of a page of units in one statement per
/// relation: primes the unit cache with the page itself (so `attempt.unit`,
/// `question.unit` and `event.unit` cost nothing) and, looking ahead at the
/// selection, loads every selected relation of all the page's units at once.
/// Batching by time alone splits a large page into several statements when
/// resolving it takes longer than the batch delay; this does not, and it
/// waits no delay either: the page's keys are all known here.
pub async fn prefetch(ctx: &Context<'_>, units: &[work_unit::Model]) {
    head_start(ctx, &ctx.look_ahead().field("edges").field("node"), units).await;
}

/// [`prefetch`] of the units a field returns itself (`unit(id:)`, a
/// mutation's unit, `heldUnit`): their selected relations loaded at once
/// rather than one batch delay per level of the selection (the contract's
/// unit selection, which MCP and the CLI send after every write, has two).
pub async fn prefetch_returned(ctx: &Context<'_>, units: &[work_unit::Model]) {
    head_start(ctx, &ctx.look_ahead(), units).await;
}

/// Only a head start: when the reads fail, each relation is loaded (and its
/// error reported on its own field, the rest of the response delivered) as
/// without it, and a write that committed is still answered with its unit.
async fn head_start(ctx: &Context<'_>, node: &async_graphql::Lookahead<'_>, units: &[work_unit::Model]) {
    let Some(loaders) = ctx.data_opt::<RequestLoaders>().map(RequestLoaders::get) else { return };
    if let Err(err) = relations(loaders, node, units).await {
        tracing::debug!(error = ?err.message, "reading the relations up front failed; loading them one by one");
    }
}

/// The relations of `units` that `node` (the selection of a unit) asks for,
/// loaded now, one statement per relation, into the request's cache (a
/// subscription's loader has none, and no payload prefetches): the
/// unit's own (attempts, questions, events and their count, the current
/// attempt, the disposal) and, once those are in, the next level that the
/// contract's unit selection reads (`attempts { endReason endedBy }`,
/// `similarAnswered` of the questions).
async fn relations(
    loaders: &Loaders,
    node: &async_graphql::Lookahead<'_>,
    units: &[work_unit::Model],
) -> Result<(), Error> {
    let (attempts, all_questions, open_question) =
        (node.field("attempts"), node.field("questions"), node.field("openQuestion"));
    let wants_current = node.field("currentAttempt").exists();
    let wants_questions = all_questions.exists() || open_question.exists();
    let events_page = first_page_of_events(node);
    let wants_event_count = node.field("events").field("totalCount").exists();
    let wants_disposal = node.field("dispositionReason").exists() || node.field("disposedBy").exists();
    // Nothing to read (a write answered with its own columns, as the claim
    // path's clients ask): nothing to cache either.
    if !(wants_current
        || attempts.exists()
        || wants_questions
        || events_page.is_some()
        || wants_event_count
        || wants_disposal)
    {
        return Ok(());
    }
    loaders.feed_many(units.iter().map(|u| (UnitId(u.id), u.clone()))).await;
    let ids = || units.iter().map(|u| u.id);
    let current = async {
        if wants_current {
            load_now(loaders, units.iter().filter_map(|u| u.current_attempt_id).map(AttemptId).collect()).await?;
        }
        Ok::<_, Error>(())
    };
    let attempts = async {
        if attempts.exists() {
            let found = load_now(loaders, ids().map(AttemptsOf).collect()).await?;
            if ["endReason", "endedBy", "reclaimedBy"].iter().any(|end| attempts.field(end).exists()) {
                // Only an ended attempt has an end (its resolvers ask for no other).
                let ended = found.values().flatten().filter(|a| a.outcome.is_some()).map(|a| AttemptEndOf(a.id));
                load_now(loaders, ended.collect()).await?;
            }
        }
        Ok::<_, Error>(())
    };
    let questions = async {
        if wants_questions {
            let found = load_now(loaders, ids().map(QuestionsOf).collect()).await?;
            let (similar_all, similar_open) =
                (all_questions.field("similarAnswered").exists(), open_question.field("similarAnswered").exists());
            if similar_all || similar_open {
                let asked = found.values().flatten();
                let wanted = asked.filter(|q| similar_all || q.status == QuestionStatus::Open);
                load_now(loaders, wanted.map(|q| SimilarAnsweredTo(q.id)).collect()).await?;
            }
        }
        Ok::<_, Error>(())
    };
    let events = async {
        if let Some((first, newest_first)) = events_page {
            load_now(loaders, ids().map(|unit| EventsOf { unit, first, after: None, newest_first }).collect()).await?;
        }
        Ok::<_, Error>(())
    };
    let event_counts = async {
        if wants_event_count {
            load_now(loaders, ids().map(EventCountOf).collect()).await?;
        }
        Ok::<_, Error>(())
    };
    let disposals = async {
        if wants_disposal {
            // Only a disposed unit has a disposal (its resolvers ask for no other).
            let disposed = units.iter().filter(|u| u.disposition.is_some()).map(|u| DisposalOf(u.id));
            load_now(loaders, disposed.collect()).await?;
        }
        Ok::<_, Error>(())
    };
    futures::try_join!(current, attempts, questions, events, event_counts, disposals)?;
    Ok(())
}

/// Loads `keys` into the request's cache at once, in one call of the loader,
/// and hands back what it found: for keys all known beforehand, which no
/// sibling will join, so waiting [`BATCH_DELAY`] for them would only add
/// latency (one delay per level of the query, the bulk of a small read's time).
async fn load_now<K>(loaders: &Loaders, keys: Vec<K>) -> Result<HashMap<K, <LedgerLoader as Loader<K>>::Value>, Error>
where
    K: Send + Sync + std::hash::Hash + Eq + Clone + 'static,
    LedgerLoader: Loader<K, Error = Error>,
{
    // Each key once, as the DataLoader sends them: a list may hold a unit
    // twice (`registerUnits` with a ref given twice), and the loaders answer
    // a repeated key from what its first occurrence already took.
    let keys: Vec<K> = keys.into_iter().collect::<std::collections::HashSet<K>>().into_iter().collect();
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let found = loaders.loader().load(&keys).await?;
    loaders.feed_many(found.iter().map(|(k, v)| (k.clone(), v.clone()))).await;
    Ok(found)
}

/// `first` and order of the selected `events(first:, order:)` when every
/// selection of it asks for the first page with a valid size in the same
/// order; otherwise None (the resolver then validates and loads on its own).
fn first_page_of_events(node: &async_graphql::Lookahead<'_>) -> Option<(i32, bool)> {
    use async_graphql::Value;
    let selections = node.field("events").selection_fields();
    let mut firsts = selections.iter().map(|field| {
        let args = field.arguments().ok()?;
        if args.iter().any(|(name, value)| name.as_str() == "after" && *value != Value::Null) {
            return None;
        }
        let first = match args.iter().find(|(name, _)| name.as_str() == "first") {
            Some((_, Value::Number(n))) => i32::try_from(n.as_i64()?).ok()?,
            Some((_, Value::Null)) | None => crate::ledger::validate::DEFAULT_PAGE,
            Some(_) => return None,
        };
        let newest_first = match args.iter().find(|(name, _)| name.as_str() == "order") {
            Some((_, Value::Enum(order))) => order.as_str() != "ASC",
            Some((_, Value::Null)) | None => true,
            Some(_) => return None,
        };
        crate::ledger::validate::first(Some(first)).ok().map(|first| (first, newest_first))
    });
    let first = firsts.next()??;
    firsts.all(|other| other == Some(first)).then_some(first)
}

/// Loads for one request's principal (and so one fleet).
pub struct LedgerLoader {
    ledger: Ledger,
    who: Principal,
}

pub type Loaders = DataLoader<LedgerLoader, HashMapCache>;

/// A batch waits this long for sibling keys. The default (1 ms) is shorter
/// than it takes to walk a page of 500 units on a busy two-core machine, which
/// splits one batch into several; 5 ms keeps a page at one statement per
/// relation for a few milliseconds of latency per nesting level.
const BATCH_DELAY: std::time::Duration = std::time::Duration::from_millis(5);

pub fn for_request(ledger: Ledger, who: Principal) -> Loaders {
    DataLoader::with_cache(LedgerLoader { ledger, who }, tokio::spawn, HashMapCache::default())
        .delay(BATCH_DELAY)
        .max_batch_size(1000)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnitId(pub Uuid);
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttemptId(pub Uuid);
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttemptsOf(pub Uuid);
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuestionsOf(pub Uuid);
/// The answered questions with the same text as a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SimilarAnsweredTo(pub Uuid);
/// A page of one unit's events: `first` rows after `after`, newest first or oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventsOf {
    pub unit: Uuid,
    pub first: i32,
    pub after: Option<Cursor>,
    pub newest_first: bool,
}
/// How many events a unit has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventCountOf(pub Uuid);
/// Who disposed of a unit and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DisposalOf(pub Uuid);
/// Who ended an attempt and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttemptEndOf(pub Uuid);

type Error = async_graphql::Error;

impl Loader<UnitId> for LedgerLoader {
    type Value = work_unit::Model;
    type Error = Error;

    async fn load(&self, keys: &[UnitId]) -> Result<HashMap<UnitId, Self::Value>, Error> {
        let rows = self.ledger.units_by_ids(&self.who, keys.iter().map(|k| k.0).collect()).await?;
        Ok(rows.into_iter().map(|u| (UnitId(u.id), u)).collect())
    }
}

impl Loader<AttemptId> for LedgerLoader {
    type Value = attempt::Model;
    type Error = Error;

    async fn load(&self, keys: &[AttemptId]) -> Result<HashMap<AttemptId, Self::Value>, Error> {
        let rows = self.ledger.attempts_by_ids(&self.who, keys.iter().map(|k| k.0).collect()).await?;
        Ok(rows.into_iter().map(|a| (AttemptId(a.id), a)).collect())
    }
}

impl Loader<AttemptsOf> for LedgerLoader {
    type Value = Vec<attempt::Model>;
    type Error = Error;

    async fn load(&self, keys: &[AttemptsOf]) -> Result<HashMap<AttemptsOf, Self::Value>, Error> {
        let rows = self.ledger.attempts_of_units(&self.who, keys.iter().map(|k| k.0).collect()).await?;
        let mut grouped = group_by(rows, |a| a.unit_id);
        Ok(keys.iter().map(|k| (*k, grouped.remove(&k.0).unwrap_or_default())).collect())
    }
}

impl Loader<QuestionsOf> for LedgerLoader {
    type Value = Vec<question::Model>;
    type Error = Error;

    async fn load(&self, keys: &[QuestionsOf]) -> Result<HashMap<QuestionsOf, Self::Value>, Error> {
        let rows = self.ledger.questions_of_units(&self.who, keys.iter().map(|k| k.0).collect()).await?;
        let mut grouped = group_by(rows, |q| q.unit_id);
        Ok(keys.iter().map(|k| (*k, grouped.remove(&k.0).unwrap_or_default())).collect())
    }
}

impl Loader<SimilarAnsweredTo> for LedgerLoader {
    type Value = Vec<question::Model>;
    type Error = Error;

    async fn load(&self, keys: &[SimilarAnsweredTo]) -> Result<HashMap<SimilarAnsweredTo, Self::Value>, Error> {
        let rows = self.ledger.similar_answered(&self.who, keys.iter().map(|k| k.0).collect()).await?;
        let mut grouped = group_by(rows, |(for_id, _)| *for_id);
        let mut take = |k: &SimilarAnsweredTo| grouped.remove(&k.0).unwrap_or_default().into_iter().map(|(_, q)| q);
        Ok(keys.iter().map(|k| (*k, take(k).collect())).collect())
    }
}

impl Loader<EventsOf> for LedgerLoader {
    /// `first + 1` rows at most (the extra one tells whether a next page
    /// exists), and the floor of their read (see `EventCursor`).
    type Value = (Vec<event::Model>, i64);
    type Error = Error;

    async fn load(&self, keys: &[EventsOf]) -> Result<HashMap<EventsOf, Self::Value>, Error> {
        // Siblings almost always ask for the same page shape: one statement per shape.
        let shapes = group_by(keys.to_vec(), |k| (k.first, k.after, k.newest_first));
        let mut out = HashMap::with_capacity(keys.len());
        for ((first, after, newest_first), keys) in shapes {
            let units: Vec<Uuid> = keys.iter().map(|k| k.unit).collect();
            let (rows, floor) = self.ledger.events_of_units(&self.who, units, first, after, newest_first).await?;
            let mut grouped = group_by(rows, |e| e.unit_id);
            for k in keys {
                out.insert(k, (grouped.remove(&k.unit).unwrap_or_default(), floor));
            }
        }
        Ok(out)
    }
}

impl Loader<EventCountOf> for LedgerLoader {
    type Value = i64;
    type Error = Error;

    async fn load(&self, keys: &[EventCountOf]) -> Result<HashMap<EventCountOf, i64>, Error> {
        let rows = self.ledger.event_counts_of_units(&self.who, keys.iter().map(|k| k.0).collect()).await?;
        let counts: HashMap<Uuid, i64> = rows.into_iter().map(|r| (r.unit_id, r.n)).collect();
        // Every key answered, 0 for a unit without events: a key left out
        // would not be cached and would be read again.
        Ok(keys.iter().map(|k| (*k, counts.get(&k.0).copied().unwrap_or(0))).collect())
    }
}

impl Loader<DisposalOf> for LedgerLoader {
    type Value = DisposalRow;
    type Error = Error;

    async fn load(&self, keys: &[DisposalOf]) -> Result<HashMap<DisposalOf, DisposalRow>, Error> {
        let rows = self.ledger.disposals_of_units(&self.who, keys.iter().map(|k| k.0).collect()).await?;
        Ok(rows.into_iter().map(|r| (DisposalOf(r.unit_id), r)).collect())
    }
}

impl Loader<AttemptEndOf> for LedgerLoader {
    type Value = AttemptEndRow;
    type Error = Error;

    async fn load(&self, keys: &[AttemptEndOf]) -> Result<HashMap<AttemptEndOf, AttemptEndRow>, Error> {
        let rows = self.ledger.attempt_ends(&self.who, keys.iter().map(|k| k.0).collect()).await?;
        Ok(rows.into_iter().map(|r| (AttemptEndOf(r.attempt_id), r)).collect())
    }
}

/// The instant an operation started: `serverTime`, and the clock every age
/// in its response (`stalledForSeconds`, `openForSeconds`) is measured with,
/// so that they agree with each other to the second.
#[derive(Debug, Clone, Copy)]
pub struct RequestTime(pub DateTime<Utc>);

/// The request's clock (see [`RequestTime`]).
pub fn now(ctx: &Context<'_>) -> DateTime<Utc> {
    ctx.data_opt::<RequestTime>().map_or_else(Utc::now, |t| t.0)
}

/// The one place DataLoaders are made: every request gets its own, with the
/// caller's principal ([`super::executor`] puts it into its data), made when
/// a resolver first asks for it. That is one per HTTP operation (each
/// operation of a batch too), MCP call and WebSocket operation. A
/// subscription runs for hours, and a loader that cached what it loaded
/// would serve stale units for as long: a subscription's loader batches each
/// payload's keys but caches nothing. Most subscriptions never make theirs
/// (`ledgerEvents` with the event's own fields), and 10,000 of them hold no
/// loader at all.
pub struct RequestLoaders {
    ledger: Ledger,
    who: Principal,
    subscription: bool,
    made: OnceLock<Loaders>,
}

impl RequestLoaders {
    pub(super) fn new(ledger: &Ledger, who: &Principal, subscription: bool) -> Self {
        Self { ledger: ledger.clone(), who: who.clone(), subscription, made: OnceLock::new() }
    }

    /// The request's loaders, made on first use.
    pub fn get(&self) -> &Loaders {
        self.made.get_or_init(|| {
            let loaders = for_request(self.ledger.clone(), self.who.clone());
            if self.subscription {
                loaders.enable_all_cache(false);
            }
            loaders
        })
    }
}
