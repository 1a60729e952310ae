//! Live events (SPEC §6): the LISTEN connection, the per-fleet fan-out, the
//! exactly-once subscriber tail and the stall sweeper. The event machinery
//! alone: the SQL it runs is in [`crate::db::events`], the WebSocket protocol
//! that carries its payloads in [`crate::http::ws`].
//!
//! Data flow: a write commits its event rows and their `pg_notify` (a
//! trigger); the process's one [`listener`] hears "the fleet with tag T has
//! news" (an opaque tag: payloads name nothing) and wakes that fleet's
//! [`feed`], which reads the fleet's new events once under its row-level
//! security and broadcasts them; each subscription's [`tail`] takes them in
//! delivery order exactly once and its resolver turns them into GraphQL
//! payloads. The [`sweeper`] appends `stalled` events, which travel the same
//! way, and a `waitForAnswer` request waits on its fleet's feed ([`wait`]).
//! The event table is the truth and notifications are only hints, which
//! is what makes reconnects, replicas, resumed streams and forged
//! notifications harmless.

pub mod feed;
pub mod listener;
pub mod memo;
pub mod sweeper;
pub mod tail;
pub mod wait;
pub mod warden;
pub mod watermark;

use std::collections::HashMap;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_graphql::dataloader::{DataLoader, Loader};
use sea_orm::{DatabaseConnection, DbErr};
use tokio::sync::{Notify, broadcast, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use listener::ListenerConfig;
pub use sweeper::SweeperConfig;
pub use warden::WardenConfig;

use crate::db;
use crate::db::entities::{attempt, question};
pub use crate::db::events::EventWriter;
use crate::ledger::{Ledger, LedgerError};
use crate::metrics::PoolSample;

use feed::Feeds;
use sweeper::Sweeper;
use warden::Warden;

use crate::projector::{Projector, ProjectorConfig};

#[derive(Debug, Clone)]
pub struct LiveConfig {
    pub sweeper: SweeperConfig,
    pub listener: ListenerConfig,
    /// The reader warden: reader logins' overlong transactions.
    pub warden: WardenConfig,
    /// The projector: the read models folded after commit.
    pub projector: ProjectorConfig,
    /// Connections of the pool the feeds, the sweeper and the health pings
    /// use, apart from the request pool so that live traffic never starves
    /// mutations (and the other way round).
    pub pool_size: u32,
    /// Events a fleet's broadcast holds for a slow subscriber before that
    /// subscriber has to read the table to catch up.
    pub broadcast_capacity: usize,
    /// How long a subscription's read (of the log: its starting point, its
    /// resume, a page of its catch-up, with its position kept; its token's
    /// check; its `includeOpen`/`includeCurrent` snapshot; a question's
    /// payload) is tried again after a transient failure (the database
    /// restarting, no pool connection within the pool's timeout, a statement
    /// or lock timeout), nothing sent meanwhile, before the subscription
    /// ends with `UNAVAILABLE` ([`Live::patiently`]).
    pub read_patience: Duration,
}

impl Default for LiveConfig {
    fn default() -> Self {
        Self {
            sweeper: SweeperConfig::default(),
            listener: ListenerConfig::default(),
            warden: WardenConfig::default(),
            projector: ProjectorConfig::default(),
            pool_size: 4,
            broadcast_capacity: 1024,
            read_patience: Duration::from_secs(30),
        }
    }
}

/// The live subsystem of one server process. Cheap to clone.
#[derive(Clone)]
pub struct Live(Arc<Inner>);

struct Inner {
    config: LiveConfig,
    db: DatabaseConnection,
    feeds: Feeds,
    sweeper: Sweeper,
    warden: Warden,
    projector: Projector,
    listening: watch::Sender<bool>,
    /// LISTEN connections opened so far (a reconnect counts one more).
    connects: watch::Sender<u64>,
    revoked: broadcast::Sender<Uuid>,
    /// What the requests' authentication knows of tokens: forgotten on
    /// every revocation notice and after a reconnect.
    known_tokens: Arc<crate::auth::Known>,
    /// Tokens of the open WebSocket connections, with their counts: checked
    /// again on every revocation notice and after a reconnect.
    tokens: Mutex<HashMap<Uuid, usize>>,
    /// Asks the token checker for one more check (notices coalesce).
    token_check: Notify,
    /// `pg_notification_queue_usage()` at the last health tick.
    queue_usage: watch::Sender<Option<f64>>,
    /// The oldest in-flight event writer at the last health tick.
    oldest_writer: watch::Sender<Option<EventWriter>>,
    /// Feeds using or waiting for a connection of this pool ([`crate::db::InFlight`]).
    waiting: Arc<AtomicI64>,
    /// Rows a subscription payload needs, read once per event ([`memo`]).
    questions: memo::Memo<(String, Uuid), Option<question::Model>>,
    attempts: memo::Memo<(String, Uuid), Option<attempt::Model>>,
    /// Streamed events' payloads by event and selection ([`Live::payloads`]).
    payloads: memo::Memo<(Uuid, Arc<str>), async_graphql::Value>,
    /// Subscriptions' token checks, asked together ([`Live::token_dead`]).
    token_checks: DataLoader<TokenChecks>,
    /// Subscriptions' starting points, read together ([`Live::start_now`]).
    starts: DataLoader<Starts>,
    /// The request pool and its users, for catching-up subscriptions' reads
    /// of the log (the feeds' go on the live pool: a reconnect storm's
    /// catch-up never starves the feeds, nor the other way round).
    requests: DatabaseConnection,
    request_users: Arc<AtomicI64>,
    /// The newest delivery watermark any read returned: catching-up
    /// subscriptions read below it ([`watermark::Known`]).
    known: Arc<watermark::Known>,
    /// Subscriptions' reads tried again ([`Live::patiently`]).
    read_retries: prometheus_client::metrics::counter::Counter,
    stop: CancellationToken,
}

/// "Now" in the event log for many subscriptions starting at once, from one
/// read on the request pool. A starting point (the delivery watermark and a
/// snapshot, [`crate::db::events::start`]) reads no fleet's rows, so one read
/// serves every fleet of the batch; the batch is read after each of its
/// subscriptions joined its fleet's broadcast, which is all a start needs
/// ([`tail`]). No cache: a later subscription gets a later read.
struct Starts {
    requests: DatabaseConnection,
    users: Arc<AtomicI64>,
}

impl Loader<String> for Starts {
    type Value = db::events::Start;
    type Error = Arc<DbErr>;

    async fn load(&self, fleets: &[String]) -> Result<HashMap<String, Self::Value>, Self::Error> {
        let Some(fleet) = fleets.first() else { return Ok(HashMap::new()) };
        let start = db::in_fleet_counted::<_, DbErr, _>(&self.requests, Some(&self.users), fleet, |tx| {
            Box::pin(async move { db::events::start(tx).await })
        })
        .await
        .map_err(Arc::new)?;
        Ok(fleets.iter().map(|f| (f.clone(), start.clone())).collect())
    }
}

/// Which of many tokens no longer work, in one statement on the live pool:
/// a reconnect storm of 10,000 subscriptions asks a few times, not 10,000.
/// No cache: each batch is read after every check in it was asked.
struct TokenChecks(DatabaseConnection);

impl Loader<Uuid> for TokenChecks {
    type Value = db::tokens::Dead;
    type Error = Arc<DbErr>;

    async fn load(&self, keys: &[Uuid]) -> Result<HashMap<Uuid, Self::Value>, Self::Error> {
        Ok(db::tokens::dead_among(&self.0, keys.to_vec()).await.map_err(Arc::new)?.into_iter().collect())
    }
}

/// The first and the longest pause between tries of a subscription's read
/// ([`Live::patiently`]).
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// Past this share of the notification queue, the listener warns: once the
/// queue is full, every write's `pg_notify` fails.
pub const QUEUE_USAGE_WARNING: f64 = 0.5;
/// An event writer open this long is logged at every health tick: it holds
/// live delivery back for every fleet until it ends.
pub const WRITER_AGE_WARNING: Duration = Duration::from_secs(30);
/// Streamed payloads kept: a reconnected subscriber's catch-up (its fleet's
/// last minute or so, 100 fleets) still finds what the others resolved.
const PAYLOADS: usize = 32 * 1024;

impl Live {
    /// Prepares the subsystem over the database `requests` connects to (with
    /// a pool of its own); nothing runs until [`Live::run_listener`] and
    /// [`Live::run_sweeper`] (`Application::run_until` runs both).
    pub fn new(ledger: &Ledger, config: LiveConfig) -> Self {
        let db = db::follower(ledger.db(), config.pool_size, "work-ledger-live");
        let stop = CancellationToken::new();
        let waiting = Arc::new(AtomicI64::new(0));
        let known = Arc::new(watermark::Known::default());
        let fresh = watermark::Fresh::new(db.clone(), waiting.clone(), ledger.metrics().live_watermarks.clone());
        Self(Arc::new(Inner {
            feeds: Feeds::new(
                db.clone(),
                config.broadcast_capacity,
                stop.clone(),
                waiting.clone(),
                known.clone(),
                fresh,
            ),
            sweeper: Sweeper::new(db.clone(), config.sweeper.clone(), ledger.metrics().stalls.clone()),
            warden: Warden::new(db.clone(), config.warden.clone()),
            projector: Projector::new(db.clone(), config.projector.clone(), ledger.metrics().projected.clone()),
            waiting,
            questions: memo::Memo::default(),
            attempts: memo::Memo::default(),
            payloads: memo::Memo::with_capacity(PAYLOADS),
            token_checks: DataLoader::new(TokenChecks(db.clone()), tokio::spawn).max_batch_size(1000),
            starts: DataLoader::new(
                Starts { requests: ledger.db().clone(), users: ledger.metrics().pool_users.clone() },
                tokio::spawn,
            )
            .max_batch_size(1000),
            requests: ledger.db().clone(),
            request_users: ledger.metrics().pool_users.clone(),
            known,
            read_retries: ledger.metrics().live_read_retries.clone(),
            listening: watch::channel(false).0,
            connects: watch::channel(0).0,
            revoked: broadcast::channel(256).0,
            known_tokens: ledger.known_tokens().clone(),
            tokens: Mutex::new(HashMap::new()),
            token_check: Notify::new(),
            queue_usage: watch::channel(None).0,
            oldest_writer: watch::channel(None).0,
            config,
            db,
            stop,
        }))
    }

    /// The listener (and the token checker it drives) until [`Live::stop`].
    pub async fn run_listener(&self) {
        tokio::join!(listener::run(self.clone()), self.check_tokens_on_notice());
    }

    /// `pg_notification_queue_usage()` (0 to 1) as the listener last saw it,
    /// as it changes; `None` before the first health tick.
    pub fn notification_queue_usage(&self) -> watch::Receiver<Option<f64>> {
        self.0.queue_usage.subscribe()
    }

    /// The oldest in-flight transaction that appended events in this
    /// database, asked now. Only such transactions hold live delivery back.
    pub async fn oldest_event_writer(&self) -> Result<Option<EventWriter>, DbErr> {
        db::events::oldest_event_writer(&self.0.db).await
    }

    /// The live pool (feeds, sweeper, health ticks; the metrics' own reads).
    pub fn pool(&self) -> &DatabaseConnection {
        &self.0.db
    }

    /// The live pool's state, for the metrics.
    pub fn pool_sample(&self) -> (PoolSample, i64) {
        let pool = self.0.db.get_postgres_connection_pool();
        (PoolSample { size: pool.size(), idle: pool.num_idle() }, crate::db::waiters(&self.0.db, &self.0.waiting))
    }

    /// The oldest in-flight event writer as the last health tick saw it.
    pub fn oldest_event_writer_sampled(&self) -> watch::Receiver<Option<EventWriter>> {
        self.0.oldest_writer.subscribe()
    }

    fn record_queue_usage(&self, usage: f64) {
        if usage > QUEUE_USAGE_WARNING {
            tracing::warn!(
                usage = format!("{:.1}%", usage * 100.0),
                "the notification queue is more than half full; a session that LISTENs and stays in a \
                 transaction holds it (see pg_stat_activity); when it is full every write fails"
            );
        }
        self.0.queue_usage.send_replace(Some(usage));
    }

    async fn sample_event_writers(&self, limit: Duration) {
        let Ok(Ok(writer)) = tokio::time::timeout(limit, self.oldest_event_writer()).await else { return };
        if let Some(EventWriter { pid, age: Some(age) }) = &writer
            && *age >= WRITER_AGE_WARNING
        {
            tracing::warn!(
                pid,
                open_for = ?age,
                "live delivery is held back by a transaction that appended events and is still open"
            );
        }
        self.0.oldest_writer.send_replace(writer);
    }

    /// The sweeper until [`Live::stop`].
    pub async fn run_sweeper(&self) {
        self.0.sweeper.run(self.0.stop.clone()).await
    }

    /// The reader warden until [`Live::stop`].
    pub async fn run_warden(&self) {
        self.0.warden.run(self.0.stop.clone()).await
    }

    /// Completed reader warden passes (a test waits for the next one).
    pub fn warden_passes(&self) -> watch::Receiver<u64> {
        self.0.warden.passes()
    }

    /// The projector until [`Live::stop`].
    pub async fn run_projector(&self) {
        self.0.projector.run(self.0.stop.clone()).await
    }

    /// Completed projector passes (a test waits for the next one).
    pub fn projector_passes(&self) -> watch::Receiver<u64> {
        self.0.projector.passes()
    }

    /// One projector pass now (tests): every projection folded up to the
    /// watermark, then the totals' delta rows compacted; the events folded.
    pub async fn project_now(&self) -> Result<u64, DbErr> {
        let folded = self.0.projector.run_once().await?;
        self.0.projector.compact().await?;
        Ok(folded)
    }

    /// [`Live::project_now`] without the compaction.
    pub async fn fold_now(&self) -> Result<u64, DbErr> {
        self.0.projector.run_once().await
    }

    /// Stops the listener, the sweeper and the feeds; everything waiting on
    /// [`Live::stopping`] (the WebSocket connections) ends too.
    pub fn stop(&self) {
        self.0.stop.cancel();
    }

    /// True while the LISTEN connection is up (`/readyz`).
    pub fn is_listening(&self) -> bool {
        *self.0.listening.borrow()
    }

    /// Whether the LISTEN connection is up, as it changes.
    pub fn listener_status(&self) -> watch::Receiver<bool> {
        self.0.listening.subscribe()
    }

    /// How many LISTEN connections were opened so far (tests wait for a reconnect).
    pub fn listener_connects(&self) -> watch::Receiver<u64> {
        self.0.connects.subscribe()
    }

    /// One sweep now, beside the background passes; returns the stalls it
    /// reported.
    pub async fn sweep_now(&self) -> Result<u64, DbErr> {
        self.0.sweeper.run_once().await
    }

    /// Completed background sweeper passes (a test waits for the next one).
    pub fn sweeper_passes(&self) -> watch::Receiver<u64> {
        self.0.sweeper.passes()
    }

    /// Resolves once [`Live::stop`] was called.
    pub fn stopping(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.0.stop.cancelled()
    }

    /// A token cancelled by [`Live::stop`], for services that take one (MCP).
    pub fn stop_token(&self) -> CancellationToken {
        self.0.stop.child_token()
    }

    /// Resolves once [`Live::stop`] was called (the HTTP server's graceful shutdown).
    pub fn stopping_owned(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
        self.0.stop.clone().cancelled_owned()
    }

    fn db(&self) -> &DatabaseConnection {
        &self.0.db
    }

    /// The questions memo: keyed by fleet and question id.
    pub fn questions(&self) -> &memo::Memo<(String, Uuid), Option<question::Model>> {
        &self.0.questions
    }

    /// The attempts memo: keyed by fleet and attempt id.
    pub fn attempts(&self) -> &memo::Memo<(String, Uuid), Option<attempt::Model>> {
        &self.0.attempts
    }

    /// The payload of a streamed event for one selection of the event's own
    /// fields, resolved once per process for every subscriber asking for it
    /// (the key is the event's id, unique across fleets, and the selection).
    pub fn payloads(&self) -> &memo::Memo<(Uuid, Arc<str>), async_graphql::Value> {
        &self.0.payloads
    }

    fn feeds(&self) -> &Feeds {
        &self.0.feeds
    }

    fn listener_config(&self) -> &ListenerConfig {
        &self.0.config.listener
    }

    fn set_listening(&self, up: bool) {
        if up {
            self.0.connects.send_modify(|n| *n += 1);
        }
        self.0.listening.send_replace(up);
    }

    /// Ids of tokens revoked from now on (the `work_ledger_tokens` channel).
    pub fn revocations(&self) -> broadcast::Receiver<Uuid> {
        self.0.revoked.subscribe()
    }

    fn token_revoked(&self, token: Uuid) {
        let _ = self.0.revoked.send(token);
    }

    /// Some token was revoked (the notice says not which, nor of what
    /// fleet): check the open connections' tokens.
    fn recheck_tokens(&self) {
        self.0.known_tokens.forget_all();
        self.0.token_check.notify_one();
    }

    async fn check_tokens_on_notice(&self) {
        loop {
            tokio::select! {
                _ = self.stopping() => return,
                _ = self.0.token_check.notified() => self.check_tokens().await,
            }
        }
    }

    /// Why `token` no longer works, asked now (`None`: it does): a
    /// subscription asks once its tail has its starting point, before it
    /// sends anything, so that a revocation takes effect on the next request
    /// (SPEC §8) and not only when its notice arrives.
    /// Checks asked at once share one statement.
    pub async fn token_dead(&self, token: Uuid) -> Result<Option<db::tokens::Dead>, LedgerError> {
        Ok(self.0.token_checks.load_one(token).await.map_err(unshare)?)
    }

    /// Up to [`feed::BATCH`] events of `fleet` after `after` for a catching-up
    /// subscription, below the watermark `below` (`None`: a new one), from a
    /// statement of its own on the request pool ([`feed::read`]).
    pub async fn catch_up_read(
        &self,
        fleet: &str,
        after: db::events::Position,
        below: Option<i64>,
    ) -> Result<db::events::Batch, LedgerError> {
        Ok(feed::read(&self.0.requests, &self.0.request_users, &self.0.known, fleet, after, below).await?)
    }

    /// The newest delivery watermark a read of this process returned (None
    /// before the first): a read that starts after this call may stop there
    /// ([`watermark::Known`]).
    pub fn known_watermark(&self) -> Option<i64> {
        self.0.known.get()
    }

    /// Notes the watermark of a read made elsewhere (a resume).
    pub fn note_watermark(&self, watermark: i64) {
        self.0.known.note(watermark);
    }

    /// `read` until it succeeds, fails for good, or has failed transiently
    /// (UNAVAILABLE: [`LedgerError::is_transient`]) for longer than the
    /// configured patience: a subscription's reads wait out a restart of the
    /// database or a moment of overload instead of ending the subscription,
    /// whose client would then come back through a new connection, a token
    /// lookup and a resume further back, and add to the load that failed the
    /// read. Tries are spaced from 100 ms doubling to 2 s, with jitter so that
    /// subscriptions failed together do not come back together.
    pub async fn patiently<T, F, Fut>(&self, mut read: F) -> Result<T, LedgerError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, LedgerError>>,
    {
        let give_up = tokio::time::Instant::now() + self.0.config.read_patience;
        let mut wait = RETRY_MIN;
        loop {
            match read().await {
                Err(err) if err.is_transient() => {
                    let pause = wait.mul_f64(rand::random_range(0.5..=1.0));
                    if tokio::time::Instant::now() + pause >= give_up {
                        return Err(err);
                    }
                    self.0.read_retries.inc();
                    tokio::time::sleep(pause).await;
                    wait = (wait * 2).min(RETRY_MAX);
                }
                done => return done,
            }
        }
    }

    /// Where the event log is now, for a subscription of `fleet` that has
    /// joined its fleet's broadcast; starts asked at once share one read.
    pub async fn start_now(&self, fleet: &str) -> Result<db::events::Start, LedgerError> {
        let start = self.0.starts.load_one(fleet.to_owned()).await.map_err(unshare)?;
        let start = start.ok_or_else(|| DbErr::RecordNotFound("the event log's starting point".into()))?;
        self.note_watermark(start.watermark);
        Ok(start)
    }

    /// Closes the connections of every tracked token that was revoked,
    /// deleted or expired (an expired one's connections close on their own
    /// timers; this catches any left).
    async fn check_tokens(&self) {
        let tokens: Vec<Uuid> = self.0.tokens.lock().unwrap_or_else(|e| e.into_inner()).keys().copied().collect();
        if tokens.is_empty() {
            return;
        }
        match db::tokens::dead_among(&self.0.db, tokens).await {
            Ok(dead) => dead.into_iter().for_each(|(t, _)| self.token_revoked(t)),
            Err(err) => tracing::warn!(error = %err, "cannot re-check the tokens of open subscriptions"),
        }
    }

    /// Registers an open connection's token, so that after a reconnect (when
    /// revocation notices may have been lost) it is checked again; unless the
    /// token already has `max` open connections (SPEC §9: WebSockets per
    /// token), checked and counted under one lock.
    pub fn try_track_token(&self, token: Uuid, max: usize) -> Option<TrackedToken> {
        let mut tokens = self.0.tokens.lock().unwrap_or_else(|e| e.into_inner());
        let open = tokens.entry(token).or_default();
        if *open >= max {
            if *open == 0 {
                tokens.remove(&token);
            }
            return None;
        }
        *open += 1;
        Some(TrackedToken { live: self.clone(), token })
    }

    /// After (re)connecting: every feed reads what it missed, and the tokens
    /// of open connections are checked for revocations missed meanwhile.
    async fn catch_up(&self) {
        self.0.known_tokens.forget_all();
        self.0.feeds.wake_all();
        self.check_tokens().await;
    }
}

/// The error of a batch every one of its callers got: the error itself for
/// the last, one the service classifies alike for the others (no database
/// text reaches a client either way).
fn unshare(shared: Arc<DbErr>) -> DbErr {
    Arc::try_unwrap(shared).unwrap_or_else(|err| {
        if db::is_unavailable(&err) {
            DbErr::ConnectionAcquire(sea_orm::error::ConnAcquireErr::Timeout)
        } else {
            DbErr::Custom("a shared read failed".into())
        }
    })
}

/// A WebSocket connection's token, counted while the connection is open.
pub struct TrackedToken {
    live: Live,
    token: Uuid,
}

impl Drop for TrackedToken {
    fn drop(&mut self) {
        let mut tokens = self.live.0.tokens.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = tokens.get_mut(&self.token) {
            *n -= 1;
            if *n == 0 {
                tokens.remove(&self.token);
            }
        }
    }
}
