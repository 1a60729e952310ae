//! Notifications after the commit (SPEC §6). A write that
//! runs with [`Notify::AfterCommit`] appends its events silently; once it
//! has committed, the ledger hands its fleet to the notifier, whose task
//! sends one `pg_notify` per fleet for everything that committed since its
//! last statement, and at most one statement every [`MIN_GAP`]. So commits
//! no longer queue behind the notification lock (PostgreSQL holds it through
//! each notifying commit's WAL flush), and a burst of writes to one fleet
//! costs one notification. A process that dies between a commit and its
//! notification delays delivery until the listeners' next re-read of the
//! table (at most a second), and loses nothing.
//!
//! The statements go on a connection of their own ([`db::follower`]), not
//! through the ledger's pool: there a notification waited its turn behind
//! the requests, and every event of the fleet with it (half the median
//! delivery time of the subscriptions bench at 500 writes a second).

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sea_orm::DatabaseConnection;
use tokio::sync::mpsc;

use crate::db::{self, Notify, events};

/// The shortest time between two notification statements.
pub const MIN_GAP: Duration = Duration::from_millis(2);

/// The notifier's session in `pg_stat_activity`.
pub const APPLICATION_NAME: &str = "work-ledger-notifier";

pub struct Notifier {
    mode: Notify,
    /// The ledger's pool, whose server and settings the notifier's own
    /// connection takes.
    db: DatabaseConnection,
    /// The task's inbox, started on first use (it ends when this is dropped).
    inbox: OnceLock<mpsc::UnboundedSender<String>>,
}

impl Notifier {
    pub fn new(db: DatabaseConnection, mode: Notify) -> Self {
        Self { mode, db, inbox: OnceLock::new() }
    }

    pub fn mode(&self) -> Notify {
        self.mode
    }

    /// A write to `fleet` committed events: announce them (after-commit mode
    /// only; in-transaction mode the trigger did).
    pub fn committed(&self, fleet: &str) {
        if self.mode == Notify::InTransaction {
            return;
        }
        let inbox = self.inbox.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(run(db::follower(&self.db, 1, APPLICATION_NAME), rx));
            tx
        });
        // The task only stops when the inbox's sender (this) is dropped.
        let _ = inbox.send(fleet.to_owned());
    }
}

async fn run(db: DatabaseConnection, mut inbox: mpsc::UnboundedReceiver<String>) {
    let mut last: Option<Instant> = None;
    let mut failing = false;
    while let Some(first) = inbox.recv().await {
        if let Some(wait) = last.map(|at| (at + MIN_GAP).saturating_duration_since(Instant::now())) {
            tokio::time::sleep(wait).await;
        }
        let mut fleets = BTreeSet::from([first]);
        while let Ok(fleet) = inbox.try_recv() {
            fleets.insert(fleet);
        }
        last = Some(Instant::now());
        match events::notify_fleets(&db, fleets.into_iter().collect()).await {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("notifying after commit again");
            }
            Ok(()) => {}
            // Subscribers still get the events from their feed's next
            // re-read. Logged once per outage, not once per write.
            Err(err) if !failing => {
                failing = true;
                tracing::warn!(error = %err, "cannot notify after commit; live delivery falls back to the re-read every second");
            }
            Err(_) => {}
        }
    }
}
