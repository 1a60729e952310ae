//! Subscriptions (SPEC §4, §6), served over `GET /graphql/ws`. Each one is a
//! [`Tail`] of the caller's fleet's event log, filtered and turned into its
//! payload type; the first two start with a snapshot of what is open (or
//! stalled) right now, and drop the live duplicates of what it held.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Arc;

use async_graphql::parser::types::{Field, Selection};
use async_graphql::registry::Registry;
use async_graphql::{
    Context, ContextSelectionSet, Object, OutputType, Positioned, ServerResult, Subscription as SubscriptionObject,
    Value,
};
use chrono::{DateTime, Utc};
use futures::stream::{self, Stream, StreamExt};
use uuid::Uuid;

use super::error::subscription_ended;
use super::loaders::{AttemptId, UnitId};
use super::types::{Attempt, BlockingQuestion, EVENT_OWN_FIELDS, WorkUnit, WorkUnitEvent};
use super::{Result, ledger, principal};
use crate::auth::{self, Permission, Principal};
use crate::db::entities::{EventType, QuestionStatus, question, work_unit};
use crate::db::events::LiveEvent;
use crate::db::tokens::Dead;
use crate::ledger::cursor::{Cursor, CursorText, List};
use crate::ledger::reads::{PageArgs, QuestionFilter};
use crate::ledger::{Ledger, LedgerError};
use crate::live::Live;
use crate::live::tail::Tail;

/// Rows per page of the initial snapshots.
const SNAPSHOT_PAGE: i32 = 500;

#[derive(Default)]
pub struct Subscription;

#[SubscriptionObject]
impl Subscription {
    /// Blocking questions as they open, oldest first. With `includeOpen` (the
    /// default) the questions open right now come first, so a triage service
    /// that restarts never misses one. At-least-once: de-duplicate by `id`.
    async fn blocking_question_opened(
        &self,
        ctx: &Context<'_>,
        assignee_group: Option<String>,
        #[graphql(default_with = "Some(true)")] include_open: Option<bool>,
    ) -> Result<impl Stream<Item = Result<BlockingQuestion>> + use<>> {
        crate::ledger::validate::filter("assigneeGroup", assignee_group.as_deref())?;
        let (live, ledger, who) = parts(ctx)?;
        let tail = Tail::from_now(&live, &ledger, &who, Some(EventType::Blocked)).await.map_err(subscription_ended)?;
        still_live(&live, &who).await.map_err(subscription_ended)?;
        let open = if include_open.unwrap_or(true) {
            live.patiently(|| open_questions(&ledger, &who, assignee_group.clone()))
                .await
                .map_err(subscription_ended)?
        } else {
            vec![]
        };
        let seen: Arc<HashSet<Uuid>> = Arc::new(open.iter().map(|q| q.id).collect());
        let live_ones = follow(tail, move |event| {
            let (live, ledger, who) = (live.clone(), ledger.clone(), who.clone());
            let (group, seen) = (assignee_group.clone(), seen.clone());
            async move {
                if event.event.event_type != EventType::Blocked {
                    return Ok(None);
                }
                let Some(id) = question_of(&event) else { return Ok(None) };
                let group_of_event = event.event.detail.get("assignee_group").and_then(|g| g.as_str());
                if seen.contains(&id) || group.as_deref().is_some_and(|g| group_of_event != Some(g)) {
                    return Ok(None);
                }
                // Read once per process for all the fleet's subscribers; a
                // subscriber whose try failed tries again by itself (the
                // memo lets one try run at a time, so a try is one read).
                let unit = event.event.unit_id;
                let question = live.patiently(|| {
                    live.questions().get_or_read((who.fleet.clone(), id), || async {
                        let questions = ledger.questions_of_units(&who, vec![unit]).await?;
                        Ok::<_, LedgerError>(questions.into_iter().find(|q| q.id == id))
                    })
                });
                Ok(question.await?.map(BlockingQuestion))
            }
        });
        Ok(stream::iter(open.into_iter().map(|q| Ok(BlockingQuestion(q)))).chain(live_ones))
    }

    /// Units whose lease expired, as the sweeper reports them (one event per
    /// attempt). With `includeCurrent` (the default) the units stalled right
    /// now come first. De-duplicate by `attempt { id }`.
    async fn unit_stalled(
        &self,
        ctx: &Context<'_>,
        domain: Option<String>,
        #[graphql(default_with = "Some(true)")] include_current: Option<bool>,
    ) -> Result<impl Stream<Item = Result<StallEvent>> + use<>> {
        crate::ledger::validate::filter("domain", domain.as_deref())?;
        let (live, ledger, who) = parts(ctx)?;
        let tail = Tail::from_now(&live, &ledger, &who, Some(EventType::Stalled)).await.map_err(subscription_ended)?;
        still_live(&live, &who).await.map_err(subscription_ended)?;
        let current = if include_current.unwrap_or(true) {
            live.patiently(|| stalled_units(&ledger, &who, domain.as_deref())).await.map_err(subscription_ended)?
        } else {
            vec![]
        };
        let seen: Arc<HashSet<Uuid>> = Arc::new(current.iter().map(|s| s.attempt_id).collect());
        let live_ones = follow(tail, move |event| {
            let (domain, seen) = (domain.clone(), seen.clone());
            async move {
                if event.event.event_type != EventType::Stalled {
                    return Ok(None);
                }
                let domain_of_event = event.event.detail.get("domain").and_then(|d| d.as_str());
                if domain.as_deref().is_some_and(|d| domain_of_event != Some(d)) {
                    return Ok(None);
                }
                Ok(StallEvent::from_event(&event).filter(|s| !seen.contains(&s.attempt_id)))
            }
        });
        Ok(stream::iter(current.into_iter().map(Ok)).chain(live_ones))
    }

    /// Every event of the caller's fleet in delivery order, exactly once.
    /// Without `after` it starts with what commits after the subscription
    /// began; with the `cursor` of an event it replays everything after that
    /// event, then goes on live, with no gap and no duplicate at the seam
    /// (also when transactions commit out of order). The cursor of an event
    /// this stream delivered resumes exactly; one read through a list
    /// (`events`, `WorkUnit.events`) never skips an event but may repeat some
    /// the list showed. Cursors stay valid after the ledger is restored from a
    /// backup into another cluster. An event waits only for transactions that
    /// appended events before it and are still open.
    async fn ledger_events(
        &self,
        ctx: &Context<'_>,
        after: Option<String>,
        unit_id: Option<Uuid>,
        types: Option<Vec<EventType>>,
    ) -> Result<impl Stream<Item = Result<StreamedEvent>> + use<>> {
        let (live, ledger, who) = parts(ctx)?;
        let selection = own_fields_only(ctx.item);
        // Asked for one type of event: woken for that type only.
        let only = match types.as_deref() {
            Some([one]) => Some(*one),
            _ => None,
        };
        let tail = match after {
            Some(cursor) => Tail::after(&live, &ledger, &who, &cursor, only).await,
            None => Tail::from_now(&live, &ledger, &who, only).await,
        }
        .map_err(subscription_ended)?;
        still_live(&live, &who).await.map_err(subscription_ended)?;
        let types: Option<Arc<HashSet<EventType>>> = types.map(|t| Arc::new(t.into_iter().collect()));
        let shared = selection.map(|selection| (live.clone(), selection));
        Ok(follow(tail, move |event| {
            let (types, shared) = (types.clone(), shared.clone());
            async move {
                let e = &event.event;
                let wanted =
                    unit_id.is_none_or(|u| e.unit_id == u) && types.as_ref().is_none_or(|t| t.contains(&e.event_type));
                Ok(wanted.then(|| StreamedEvent { event: WorkUnitEvent::streamed(e.clone()), shared }))
            }
        }))
    }
}

/// An event as `ledgerEvents` streams it (the schema's `WorkUnitEvent`).
/// When the subscription selects only the event's own fields
/// ([`own_fields_only`]), its payload is the same for every subscriber with
/// that selection, and is resolved once per process for all of them
/// ([`Live::payloads`]) instead of once per subscriber.
pub struct StreamedEvent {
    event: WorkUnitEvent,
    /// The process's payloads and the selection's key, when shareable.
    shared: Option<(Live, Arc<str>)>,
}

impl OutputType for StreamedEvent {
    fn type_name() -> std::borrow::Cow<'static, str> {
        WorkUnitEvent::type_name()
    }

    fn create_type_info(registry: &mut Registry) -> String {
        WorkUnitEvent::create_type_info(registry)
    }

    async fn resolve(&self, ctx: &ContextSelectionSet<'_>, field: &Positioned<Field>) -> ServerResult<Value> {
        let resolve = || OutputType::resolve(&self.event, ctx, field);
        match &self.shared {
            Some((live, selection)) => live.payloads().get_or_read((self.event.0.id, selection.clone()), resolve).await,
            None => resolve().await,
        }
    }
}

/// A key for the selection of `field` when it is a plain list of the event's
/// own fields (each without argument, directive or sub-selection; no
/// fragment), which resolve to the same values whoever asks; `None` for any
/// other selection, which each subscriber resolves for itself.
fn own_fields_only(field: &Positioned<Field>) -> Option<Arc<str>> {
    let mut key = String::new();
    for selection in &field.node.selection_set.node.items {
        let Selection::Field(own) = &selection.node else { return None };
        let own = &own.node;
        let plain = own.arguments.is_empty() && own.directives.is_empty() && own.selection_set.node.items.is_empty();
        if !plain || !EVENT_OWN_FIELDS.contains(&own.name.node.as_str()) {
            return None;
        }
        let _ = write!(key, "{}:{},", own.response_key().node, own.name.node);
    }
    Some(key.into())
}

/// The subscription's token is still live: asked after its tail has taken
/// its starting point (so the check delays nothing it will deliver) and
/// before anything is sent. Revoked or expired: UNAUTHENTICATED, like any
/// request. A check that fails for a moment is asked again
/// ([`Live::patiently`]), like the subscription's other reads.
async fn still_live(live: &Live, who: &Principal) -> std::result::Result<(), LedgerError> {
    match live.patiently(|| live.token_dead(who.token_id)).await? {
        None => Ok(()),
        Some(Dead::Revoked) => {
            Err(LedgerError::Unauthenticated("the token was revoked: ask an operator for a valid one".into()))
        }
        Some(Dead::Expired(at)) => Err(LedgerError::Unauthenticated(auth::expired(at).into())),
    }
}

/// The subscription's context: it needs `ledger:read` like any read.
fn parts(ctx: &Context<'_>) -> std::result::Result<(Live, Ledger, Principal), LedgerError> {
    let who = principal(ctx)?;
    who.require(Permission::LedgerRead)?;
    let live = ctx
        .data_opt::<Live>()
        .ok_or_else(|| LedgerError::invalid("operation", "subscriptions are served over WebSocket at /graphql/ws"))?;
    Ok((live.clone(), ledger(ctx).clone(), who.clone()))
}

/// The tail's events mapped by `pick` (`None` skips one); ends after an
/// error, which the client sees, and from which it can resume.
fn follow<T, F, Fut>(tail: Tail, pick: F) -> impl Stream<Item = Result<T>>
where
    T: Send + 'static,
    F: Fn(Arc<LiveEvent>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = std::result::Result<Option<T>, LedgerError>> + Send,
{
    stream::unfold(Some((tail, pick)), |state| async move {
        let (mut tail, pick) = state?;
        loop {
            let picked = match tail.next().await {
                Ok(Some(event)) => pick(event).await,
                Ok(None) => return None,
                Err(err) => Err(err),
            };
            match picked {
                Ok(Some(item)) => return Some((Ok(item), Some((tail, pick)))),
                Ok(None) => continue,
                Err(err) => return Some((Err(subscription_ended(err)), None)),
            }
        }
    })
}

/// The question a `blocked` event opened (the write path records its id).
fn question_of(event: &LiveEvent) -> Option<Uuid> {
    event.event.detail.get("question_id")?.as_str()?.parse().ok()
}

async fn open_questions(
    ledger: &Ledger,
    who: &Principal,
    group: Option<String>,
) -> std::result::Result<Vec<question::Model>, LedgerError> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let args = PageArgs { first: Some(SNAPSHOT_PAGE), after };
        let filter =
            QuestionFilter { status: Some(QuestionStatus::Open), assignee_group: group.clone(), ..Default::default() };
        let page = ledger.questions_page(who, args, filter).await?;
        after = page.items.last().map(|q| Cursor { created_at: q.created_at, id: q.id }.encode(List::Questions));
        all.extend(page.items);
        if !page.has_next {
            return Ok(all);
        }
    }
}

async fn stalled_units(
    ledger: &Ledger,
    who: &Principal,
    domain: Option<&str>,
) -> std::result::Result<Vec<StallEvent>, LedgerError> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = ledger.stalls_page(who, PageArgs { first: Some(SNAPSHOT_PAGE), after }).await?;
        after = page.items.last().map(|u| Cursor { created_at: u.created_at, id: u.id }.encode(List::Stalls));
        let wanted = page.items.into_iter().filter(|u| domain.is_none_or(|d| u.domain == d));
        all.extend(wanted.filter_map(StallEvent::from_unit));
        if !page.has_next {
            return Ok(all);
        }
    }
}

/// A unit whose lease expired while CLAIMED or IN_PROGRESS: its holder went
/// silent. The unit is reclaimable by `claimNext`.
pub struct StallEvent {
    unit_id: Uuid,
    attempt_id: Uuid,
    agent_id: String,
    last_heartbeat_at: Option<DateTime<Utc>>,
    lease_expired_at: DateTime<Utc>,
}

impl StallEvent {
    /// A stalled unit as it is now (a CHECK constraint guarantees holder,
    /// attempt and lease on a CLAIMED or IN_PROGRESS unit).
    fn from_unit(unit: work_unit::Model) -> Option<Self> {
        Some(Self {
            unit_id: unit.id,
            attempt_id: unit.current_attempt_id?,
            agent_id: unit.claimed_by?,
            last_heartbeat_at: unit.last_heartbeat_at,
            lease_expired_at: unit.lease_expires_at?,
        })
    }

    /// From a `stalled` event (the sweeper records the lease in its detail).
    fn from_event(event: &LiveEvent) -> Option<Self> {
        let e = &event.event;
        let time = |field: &str| {
            e.detail.get(field)?.as_str().and_then(|t| DateTime::parse_from_rfc3339(t).ok()).map(|t| t.to_utc())
        };
        Some(Self {
            unit_id: e.unit_id,
            attempt_id: e.attempt_id?,
            agent_id: e.agent_id.clone()?,
            last_heartbeat_at: time("last_heartbeat_at"),
            lease_expired_at: time("lease_expired_at")?,
        })
    }
}

#[Object]
impl StallEvent {
    async fn unit(&self, ctx: &Context<'_>) -> Result<WorkUnit> {
        let unit = super::loaders(ctx)?.load_one(UnitId(self.unit_id)).await?;
        Ok(WorkUnit(unit.ok_or_else(|| LedgerError::not_found("unit", self.unit_id))?))
    }
    /// The attempt whose lease expired (one stall per attempt: its id de-duplicates).
    async fn attempt(&self, ctx: &Context<'_>) -> Result<Attempt> {
        let load = || async { super::loaders(ctx)?.load_one(AttemptId(self.attempt_id)).await };
        // Over WebSocket: read once per process for all the fleet's subscribers.
        let attempt = match ctx.data_opt::<Live>() {
            Some(live) => live.attempts().get_or_read((principal(ctx)?.fleet.clone(), self.attempt_id), load).await?,
            None => load().await?,
        };
        Ok(Attempt(attempt.ok_or_else(|| LedgerError::not_found("attempt", self.attempt_id))?))
    }
    /// The agent that held the unit and went silent.
    async fn agent_id(&self) -> &str {
        &self.agent_id
    }
    async fn last_heartbeat_at(&self) -> Option<DateTime<Utc>> {
        self.last_heartbeat_at
    }
    async fn lease_expired_at(&self) -> DateTime<Utc> {
        self.lease_expired_at
    }
}
