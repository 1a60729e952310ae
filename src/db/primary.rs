//! Finding the read-write server of a list, and following it when it moves
//! (a failover or a planned switchover of a pg_auto_failover formation).
//!
//! A [`Primary`] owns the pools opened on one multi-host (or
//! `target_session_attrs=read-write`) URL: the request pool and the pools
//! opened beside it (the live pool and the notifier's, `db::follower`;
//! through the live pool, the LISTEN connection).
//! It points them at the first listed server whose
//! `SHOW transaction_read_only` is `off` (the test libpq makes for
//! `read-write`; `pg_is_in_recovery()` is not enough: a promoted node stays
//! read-only while the monitor waits out the old primary's demote timeout).
//! Every new pooled connection checks the same again and is refused when
//! the server turned read-only.
//!
//! Its watcher re-checks that server every second on a connection of its
//! own, and at once whenever some part of the process met a lost
//! connection or a read-only server ([`suspect`]). When the server is no
//! longer read-write it asks every listed server at once; when none is,
//! the pools are *parked* until one is: sqlx would otherwise retry refused
//! connections until the acquire timeout, and a client is better served by
//! an immediate `UNAVAILABLE` (it retries with the same idempotency key).
//! Connections opened before a move are closed when next handed out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use sea_orm::sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sea_orm::sqlx::{self, ConnectOptions as _, Connection as _};
use sea_orm::{DbErr, RuntimeErr};
use tokio::sync::watch;

use super::target::{Target, with_server};

/// How long one server may take to connect and answer the check.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the watcher checks the current server when nothing happened.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// How often it asks the listed servers while none is read-write.
const RETRY_INTERVAL: Duration = Duration::from_millis(100);
/// How long opening a pool waits for a read-write server.
const STARTUP_WAIT: Duration = Duration::from_secs(10);
/// Where parked pools "connect": a socket path that does not exist, which
/// fails at once with an error sqlx does not retry.
const PARKED: &str = "/nonexistent/work-ledger-no-read-write-server";
const PROBE_APPLICATION_NAME: &str = "work-ledger-probe";

/// Bumped by [`suspect`]; every watcher checks its server on a change.
static SUSPICIONS: LazyLock<watch::Sender<u64>> = LazyLock::new(|| watch::channel(0).0);
/// The live watchers, to find the one a pool belongs to ([`owner`]).
static PRIMARIES: Mutex<Vec<Weak<Primary>>> = Mutex::new(Vec::new());

/// Something met a lost connection, a server shutting down or a read-only
/// transaction: every watcher checks its server now (a cheap query when it
/// is fine).
pub fn suspect() {
    SUSPICIONS.send_modify(|n| *n = n.wrapping_add(1));
}

pub struct Primary {
    target: Target,
    created: Instant,
    /// When the pools were last re-pointed, as nanoseconds after `created`:
    /// connections older than that are closed instead of handed out.
    moved_at: AtomicU64,
    state: Mutex<State>,
}

struct State {
    /// The server the pools point at (the last one, while parked).
    current: usize,
    parked: bool,
    /// Each pool with its own connect options (session settings, application
    /// name), which are re-pointed at another server.
    pools: Vec<(PgPool, PgConnectOptions)>,
}

impl Primary {
    /// Finds the read-write server of `target`, waiting up to
    /// [`STARTUP_WAIT`] for one (a formation may be failing over).
    pub async fn find(target: Target) -> Result<Arc<Self>, DbErr> {
        let deadline = Instant::now() + STARTUP_WAIT;
        let current = loop {
            match discover(&target).await {
                Ok(i) => break i,
                Err(_) if Instant::now() < deadline => tokio::time::sleep(RETRY_INTERVAL).await,
                Err(why) => {
                    return Err(DbErr::Conn(RuntimeErr::Internal(format!("no read-write server among {why}"))));
                }
            }
        };
        let primary = Arc::new(Self {
            target,
            created: Instant::now(),
            moved_at: AtomicU64::new(0),
            state: Mutex::new(State { current, parked: false, pools: Vec::new() }),
        });
        let mut all = lock(&PRIMARIES);
        all.retain(|p| p.strong_count() > 0);
        all.push(Arc::downgrade(&primary));
        Ok(primary)
    }

    /// `options` pointed at the current server.
    pub fn point(&self, options: &PgConnectOptions) -> PgConnectOptions {
        with_server(options, &self.target, lock(&self.state).current)
    }

    /// The URL of the current server alone, for libpq tools.
    pub fn libpq_url(&self) -> String {
        self.target.libpq_url(lock(&self.state).current)
    }

    /// Pool options that refuse read-only servers.
    pub fn pool_options(options: PgPoolOptions) -> PgPoolOptions {
        options.after_connect(|conn, _| {
            Box::pin(async move {
                if is_read_write(conn).await? {
                    return Ok(());
                }
                suspect();
                Err(sqlx::Error::Configuration("the server is read-only (a standby, or being demoted)".into()))
            })
        })
    }

    /// Whether a pooled connection `age` old was opened since the last move
    /// (else the pool closes it and opens another): the pool's
    /// `before_acquire` check, after its idle ping ([`super::IDLE_PING`]).
    pub fn opened_since_move(me: &Weak<Self>, age: Duration) -> bool {
        me.upgrade().is_none_or(|p| !p.moved_since(age))
    }

    /// Keeps `pool` pointed at the read-write server from now on; the first
    /// pool starts the watcher.
    pub fn adopt(self: &Arc<Self>, pool: &PgPool) {
        let options = (*pool.connect_options()).clone();
        let mut state = lock(&self.state);
        let first = state.pools.is_empty();
        pool.set_connect_options(self.aimed(&state, &options));
        state.pools.push((pool.clone(), options));
        drop(state);
        if first {
            tokio::spawn(self.clone().watch());
        }
    }

    fn aimed(&self, state: &State, options: &PgConnectOptions) -> PgConnectOptions {
        if state.parked { options.clone().socket(PARKED) } else { with_server(options, &self.target, state.current) }
    }

    fn moved_since(&self, age: Duration) -> bool {
        let moved = Duration::from_nanos(self.moved_at.load(Ordering::Acquire));
        age > self.created.elapsed().saturating_sub(moved)
    }

    /// Points every pool at server `i`, or parks them (`None`).
    fn move_to(&self, next: Option<usize>, why: &str) {
        let mut state = lock(&self.state);
        match next {
            Some(i) if !state.parked && state.current == i => return,
            None if state.parked => return,
            Some(i) => {
                tracing::warn!(server = %self.target.name(i), "the read-write server is now this one");
                state.current = i;
                state.parked = false;
            }
            None => {
                tracing::warn!(
                    servers = %why,
                    "no read-write server: database work answers UNAVAILABLE until one appears"
                );
                state.parked = true;
            }
        }
        for (pool, options) in &state.pools {
            pool.set_connect_options(self.aimed(&state, options));
        }
        // After the pools moved: a connection opened in between counts as
        // old, which costs a reconnect, never a write on the wrong server.
        let now = u64::try_from(self.created.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.moved_at.store(now, Ordering::Release);
    }

    fn current(&self) -> Option<usize> {
        let state = lock(&self.state);
        (!state.parked).then_some(state.current)
    }

    fn all_closed(&self) -> bool {
        lock(&self.state).pools.iter().all(|(pool, _)| pool.is_closed())
    }

    /// Until every pool is closed: checks the current server every
    /// [`PROBE_INTERVAL`] or on suspicion, and finds the next one when it
    /// is lost.
    async fn watch(self: Arc<Self>) {
        let mut suspicions = SUSPICIONS.subscribe();
        let mut probe: Option<PgConnection> = None;
        while !self.all_closed() {
            if let Some(i) = self.current()
                && self.still_read_write(&mut probe, i).await
            {
                tokio::select! {
                    _ = suspicions.changed() => {}
                    _ = tokio::time::sleep(PROBE_INTERVAL) => {}
                }
                continue;
            }
            match discover(&self.target).await {
                Ok(i) => self.move_to(Some(i), ""),
                Err(why) => {
                    self.move_to(None, &why);
                    tokio::time::sleep(RETRY_INTERVAL).await;
                }
            }
        }
        if let Some(conn) = probe {
            let _ = conn.close().await;
        }
    }

    async fn still_read_write(&self, probe: &mut Option<PgConnection>, i: usize) -> bool {
        let check = async {
            if probe.is_none() {
                *probe = Some(probe_options(&self.target, i).connect().await?);
            }
            match probe.as_mut() {
                Some(conn) => is_read_write(conn).await,
                None => Ok(false),
            }
        };
        match tokio::time::timeout(PROBE_TIMEOUT, check).await {
            Ok(Ok(true)) => true,
            _ => {
                *probe = None;
                false
            }
        }
    }
}

/// The [`Primary`] that keeps `leader` pointed at the read-write server,
/// with the options it opened `leader` with: what a pool opened beside it
/// starts from, and is then [`Primary::adopt`]ed by. Not `leader`'s current
/// options, which while no server is read-write point at the parked socket;
/// a pool opened from those would keep that socket after the next move
/// ([`with_server`] sets host and port only). `None` for a single plain
/// server.
pub fn owner(leader: &PgPool) -> Option<(Arc<Primary>, PgConnectOptions)> {
    let primaries: Vec<_> = lock(&PRIMARIES).iter().filter_map(Weak::upgrade).collect();
    primaries.into_iter().find_map(|p| {
        let opened = lock(&p.state)
            .pools
            .iter()
            .find(|(pool, _)| std::ptr::eq(pool.options(), leader.options()))
            .map(|(_, opened)| opened.clone());
        opened.map(|opened| (p, opened))
    })
}

/// The first listed server that is read-write, asking all at once; else
/// what each said.
pub async fn discover(target: &Target) -> Result<usize, String> {
    let probes = (0..target.len()).map(|i| async move {
        let check = async {
            let mut conn = probe_options(target, i).connect().await?;
            let read_write = is_read_write(&mut conn).await;
            let _ = conn.close().await;
            read_write
        };
        match tokio::time::timeout(PROBE_TIMEOUT, check).await {
            Ok(Ok(read_write)) => Ok(read_write),
            Ok(Err(err)) => Err(err.to_string()),
            Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
        }
    });
    let answers = futures::future::join_all(probes).await;
    if let Some(i) = answers.iter().position(|a| matches!(a, Ok(true))) {
        return Ok(i);
    }
    let said = answers.iter().enumerate().map(|(i, answer)| {
        let what = match answer {
            Ok(_) => "read-only",
            Err(err) => err.as_str(),
        };
        format!("{} ({what})", target.name(i))
    });
    Err(said.collect::<Vec<_>>().join(", "))
}

fn probe_options(target: &Target, i: usize) -> PgConnectOptions {
    target.options(i).application_name(PROBE_APPLICATION_NAME)
}

async fn is_read_write(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    let value: String = sqlx::query_scalar("SHOW transaction_read_only").fetch_one(conn).await?;
    Ok(value == "off")
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use sea_orm::SqlxPostgresConnector;

    use super::*;

    /// A pool opened beside the request pool while no server is read-write
    /// (the notifier's, on its first write after a failover began) moves to
    /// the next read-write server with the others, instead of keeping the
    /// parked socket it would copy from the request pool's current options.
    #[tokio::test]
    async fn a_pool_opened_beside_a_parked_pool_moves_with_it_to_the_next_server() {
        let target = Target::parse("postgres://u@127.0.0.1:1,127.0.0.1:2/db").expect("a multi-host URL");
        let primary = Arc::new(Primary {
            created: Instant::now(),
            moved_at: AtomicU64::new(0),
            state: Mutex::new(State { current: 0, parked: false, pools: Vec::new() }),
            target,
        });
        lock(&PRIMARIES).push(Arc::downgrade(&primary));
        // The request pool, adopted without starting the watcher (these
        // servers do not exist): the test moves the pools itself.
        let opened = primary.target.options(0);
        let requests = PgPoolOptions::new().max_connections(1).connect_lazy_with(opened.clone());
        lock(&primary.state).pools.push((requests.clone(), opened));
        primary.move_to(None, "none answers");
        assert_eq!(
            requests.connect_options().get_socket().map(|p| p.to_string_lossy().into_owned()),
            Some(PARKED.into())
        );

        let beside =
            crate::db::follower(&SqlxPostgresConnector::from_sqlx_postgres_pool(requests.clone()), 1, "beside");
        primary.move_to(Some(1), "");

        let options = beside.get_postgres_connection_pool().connect_options();
        assert_eq!(options.get_socket(), None, "the parked socket stayed");
        assert_eq!((options.get_host(), options.get_port()), ("127.0.0.1", 2));
        assert_eq!(options.get_application_name(), Some("beside"));
        let requests_now = requests.connect_options();
        assert_eq!((requests_now.get_socket(), requests_now.get_port()), (None, 2));
    }
}
