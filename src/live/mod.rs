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
//!
//! A subscription's own reads beside the feed (its starting point, its
//! catch-up, their patience) are in [`reads`]; the tokens of open
//! connections, checked again on revocations, in [`tokens`]; what the
//! listener's health ticks sample, in [`health`].

pub mod feed;
mod health;
pub mod listener;
pub mod memo;
mod reads;
pub mod sweeper;
pub mod tail;
mod tokens;
pub mod wait;
pub mod warden;
pub mod watermark;

use std::collections::HashMap;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_graphql::dataloader::DataLoader;
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
use crate::ledger::Ledger;
use crate::metrics::PoolSample;

use feed::Feeds;
pub use health::{QUEUE_USAGE_WARNING, WRITER_AGE_WARNING};
use reads::Starts;
use sweeper::Sweeper;
use tokens::TokenChecks;
pub use tokens::TrackedToken;
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
            projector: Projector::new(
                db::follower(ledger.db(), crate::projector::FOLDERS, "work-ledger-projector"),
                config.projector.clone(),
                ledger.metrics().projected.clone(),
            ),
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

    /// The live pool (feeds, sweeper, health ticks; the metrics' own reads).
    pub fn pool(&self) -> &DatabaseConnection {
        &self.0.db
    }

    /// The live pool's state, for the metrics.
    pub fn pool_sample(&self) -> (PoolSample, i64) {
        let pool = self.0.db.get_postgres_connection_pool();
        (PoolSample { size: pool.size(), idle: pool.num_idle() }, crate::db::waiters(&self.0.db, &self.0.waiting))
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
