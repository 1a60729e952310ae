//! The projection from Temporal (SPEC §12): where a fleet's units run as
//! Temporal workflows, the ledger reads their histories from Temporal's
//! frontend ([`client`], reads only) and records what happened as ledger
//! events ([`mapping`], [`run`]), through the writes every other write
//! takes, as the workflow. It never writes to Temporal.
//!
//! Every `interval` a pass lists the runs started since its last list (the
//! whole of each link's filter at start and every `resync`) and those of
//! the open units registered with a `workflowId` by hand, and hands each
//! workflow with a run not closed to a follower ([`follow`]) that reads its
//! history as Temporal writes it and projects each event past the run's
//! mark (`temporal_runs`, moved in the transaction of the write that
//! projected the event). Any number of replicas may run it at once, and
//! each event is projected once (its `source_event_id` is unique). Temporal
//! away is a warning with backoff, never a failed readiness.

pub mod client;
mod follow;
pub mod mapping;
mod metrics;
mod run;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::db;
use crate::ledger::{Ledger, RegisterUnit, validate};
pub use client::{Run, TemporalEndpoint, TemporalReads};
use follow::{Context, Tokens, Workflow};
pub use metrics::TemporalMetrics;

#[derive(Debug, Clone)]
pub struct TemporalConfig {
    pub endpoint: TemporalEndpoint,
    /// Time between passes.
    pub interval: Duration,
    /// Longest wait between tries while Temporal is away.
    pub max_backoff: Duration,
    /// Time between passes that list each link's filter whole (the others
    /// list the runs started since the last list).
    pub resync: Duration,
}

impl TemporalConfig {
    pub fn new(endpoint: TemporalEndpoint) -> Self {
        Self {
            endpoint,
            interval: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            resync: Duration::from_secs(300),
        }
    }
}

/// The identity the client announces to Temporal (no history ever holds
/// it: the client only reads).
pub const IDENTITY: &str = "work-ledger-projection";

/// How far before its last list a pass lists again: a run shows in
/// Temporal's visibility store a moment after it starts.
const LIST_OVERLAP: chrono::TimeDelta = chrono::TimeDelta::seconds(10);

/// A workflow of a fleet: (fleet, namespace, workflow id).
type Key = (String, String, String);

pub struct TemporalProjection {
    ledger: Ledger,
    config: TemporalConfig,
    metrics: TemporalMetrics,
    tokens: Tokens,
    /// What the followers share, made with the connection to Temporal.
    context: Option<Arc<Context>>,
    followers: HashMap<Key, JoinHandle<Result<(), String>>>,
    /// Workflows whose follower failed: listed by id at the next pass.
    failed: HashSet<Key>,
    /// When each link was last listed (as a pass started), and when whole.
    listed: HashMap<db::temporal::Link, DateTime<Utc>>,
    resynced: Option<Instant>,
}

impl TemporalProjection {
    pub fn new(ledger: Ledger, config: TemporalConfig) -> Self {
        let metrics = TemporalMetrics::registered(ledger.metrics());
        Self {
            ledger,
            config,
            metrics,
            tokens: Tokens::default(),
            context: None,
            followers: HashMap::new(),
            failed: HashSet::new(),
            listed: HashMap::new(),
            resynced: None,
        }
    }

    /// Passes every `interval` until `stop`; while Temporal is away, tries
    /// again after a backoff that doubles up to `max_backoff`, warning once
    /// per try.
    pub async fn run(mut self, stop: CancellationToken) {
        let mut backoff = self.config.interval;
        loop {
            let wait = match self.pass().await {
                Ok(()) => {
                    backoff = self.config.interval;
                    self.config.interval
                }
                Err(err) => {
                    // Reconnect, and list whole: what failed to list is not lost.
                    self.context = None;
                    self.resynced = None;
                    backoff = (backoff * 2).min(self.config.max_backoff);
                    tracing::warn!(error = %err, retry_in = ?backoff, "Temporal projection: Temporal is not reachable or refused a read; trying again");
                    backoff
                }
            };
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
            }
        }
        for (_, follower) in self.followers.drain() {
            follower.abort();
        }
        self.tokens.revoke_all(&self.ledger).await;
    }

    /// One pass: the followers that ended are collected, the runs new since
    /// the last pass listed, and each workflow with a run not closed and no
    /// follower gets one.
    pub async fn pass(&mut self) -> Result<(), String> {
        let context = match &self.context {
            Some(context) => context.clone(),
            None => {
                let reads = TemporalReads::connect(&self.config.endpoint, IDENTITY).await?;
                let context = Context::new(self.ledger.clone(), reads, self.tokens.clone(), self.metrics.clone());
                self.context.insert(Arc::new(context)).clone()
            }
        };
        self.collect().await;
        let whole = self.resynced.is_none_or(|at| at.elapsed() >= self.config.resync);
        let started = Utc::now();
        let found = self.found(&context.reads, whole, started).await?;
        if whole {
            self.resynced = Some(Instant::now());
        }
        let marks = db::temporal::marks_of(self.ledger.db(), found.keys()).await.map_err(|e| e.to_string())?;
        let mut new = Vec::new();
        for (key, mut runs) in found {
            runs.sort_by_key(|r| (r.started_us, r.run_id.clone()));
            let open: Vec<(String, i64)> = runs
                .iter()
                .filter_map(|r| match marks.get(&(key.0.clone(), key.1.clone(), key.2.clone(), r.run_id.clone())) {
                    Some((_, true)) => None,
                    Some((after, false)) => Some((r.run_id.clone(), *after)),
                    None => Some((r.run_id.clone(), 0)),
                })
                .collect();
            if open.is_empty() {
                continue;
            }
            let known = runs.into_iter().map(|r| r.run_id).collect();
            let (fleet, namespace, workflow_id) = key.clone();
            new.push((key, Workflow { fleet, namespace, workflow_id, open, known }));
        }
        self.register(&context, &new).await;
        for (key, workflow) in new {
            self.followers.insert(key, tokio::spawn(follow::follow(context.clone(), workflow)));
        }
        self.metrics.lag.set(context.take_lag());
        Ok(())
    }

    /// Registers the units of the workflows about to be followed that have
    /// none yet, a write per fleet for up to a thousand, rather than one
    /// each when their followers start (which still register a unit this
    /// missed).
    async fn register(&self, context: &Context, workflows: &[(Key, Workflow)]) {
        let mut by_fleet = BTreeMap::<&str, Vec<String>>::new();
        for (_, w) in workflows {
            by_fleet.entry(&w.fleet).or_default().push(w.workflow_id.clone());
        }
        for (fleet, ids) in by_fleet {
            let registered = match db::temporal::registered(self.ledger.db(), fleet, &ids).await {
                Ok(registered) => registered,
                Err(e) => {
                    return tracing::warn!(error = %e, "Temporal projection: cannot read which workflows have units");
                }
            };
            let units: Vec<RegisterUnit> =
                ids.into_iter().filter(|id| !registered.contains(id)).map(|id| run::workflow_unit(&id)).collect();
            let mut units = units.into_iter().peekable();
            while units.peek().is_some() {
                let batch: Vec<RegisterUnit> = units.by_ref().take(validate::MAX_REGISTER_BATCH).collect();
                let done = match context.who(fleet).await {
                    Ok(who) => self.ledger.register_units(&who, batch).await.map(|_| ()).map_err(|e| e.to_string()),
                    Err(e) => Err(e),
                };
                if let Err(e) = done {
                    tracing::warn!(fleet, error = %e, "Temporal projection: registering new workflows' units failed; each follower registers its own");
                }
            }
        }
    }

    /// Takes the followers that ended; those that failed are listed again
    /// at this pass.
    async fn collect(&mut self) {
        let ended: Vec<Key> = self.followers.iter().filter(|(_, f)| f.is_finished()).map(|(k, _)| k.clone()).collect();
        for key in ended {
            let Some(follower) = self.followers.remove(&key) else { continue };
            let failure = match follower.await {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e,
                Err(e) => e.to_string(),
            };
            tracing::warn!(workflow = %key.2, fleet = %key.0, error = %failure, "Temporal projection: following a workflow failed; it is listed again");
            self.failed.insert(key);
        }
    }

    /// The runs of workflows without a follower that this pass looks at:
    /// those each link's filter lists (whole, or started since its last
    /// list), those of workflows whose follower failed, and those of every
    /// open unit registered with a `workflowId` by hand.
    async fn found(
        &mut self,
        reads: &TemporalReads,
        whole: bool,
        started: DateTime<Utc>,
    ) -> Result<BTreeMap<Key, Vec<Run>>, String> {
        let db = self.ledger.db();
        let mut found = BTreeMap::<Key, Vec<Run>>::new();
        for link in db::temporal::links(db).await.map_err(|e| e.to_string())? {
            let query = match self.listed.get(&link) {
                Some(last) if !whole => client::started_since(&link.query, *last - LIST_OVERLAP),
                _ => link.query.clone(),
            };
            for run in reads.list(&link.namespace, &query).await? {
                let key = (link.fleet.clone(), link.namespace.clone(), run.workflow_id.clone());
                if !self.followers.contains_key(&key) {
                    found.entry(key).or_default().push(run);
                }
            }
            self.listed.insert(link, started);
        }
        // Units whose runs were seen are followed from the links' lists and
        // the runs their closing events name; the others are looked up by
        // id at each pass, every one at a whole pass.
        let mut by_id: Vec<Key> = self.failed.drain().collect();
        for (fleet, namespace, workflow_id) in
            db::temporal::followable_units(db, whole).await.map_err(|e| e.to_string())?
        {
            by_id.push((fleet, namespace.unwrap_or_else(|| self.config.endpoint.namespace.clone()), workflow_id));
        }
        for key in by_id {
            if found.contains_key(&key) || self.followers.contains_key(&key) {
                continue;
            }
            let runs = reads.list(&key.1, &client::runs_of(&key.2)).await?;
            if !runs.is_empty() {
                found.insert(key, runs);
            }
        }
        Ok(found)
    }
}
