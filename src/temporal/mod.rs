//! The projection from Temporal (SPEC §12): where a fleet's units run as
//! Temporal workflows, the ledger reads their histories from Temporal's
//! frontend ([`client`], reads only) and records what happened as ledger
//! events ([`mapping`], [`run`]), through the writes every other write
//! takes, as the workflow. It never writes to Temporal.
//!
//! Every `interval` a pass lists the runs of each link's filter and of the
//! units registered with a `workflowId` by hand, and projects each run's
//! history past its mark (`temporal_runs`, moved in the transaction of the
//! write that projected the event); any number of replicas may run it at
//! once, and each event is projected once (its `source_event_id` is unique).
//! Temporal away is a warning with backoff, never a failed readiness.

pub mod client;
pub mod mapping;
mod metrics;
mod run;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use futures::future::try_join_all;
use tokio_util::sync::CancellationToken;

use crate::auth::{self, Permission, Principal};
use crate::db;
use crate::ledger::Ledger;
pub use client::{Run, TemporalEndpoint, TemporalReads};
pub use metrics::TemporalMetrics;

#[derive(Debug, Clone)]
pub struct TemporalConfig {
    pub endpoint: TemporalEndpoint,
    /// Time between passes.
    pub interval: Duration,
    /// Longest wait between tries while Temporal is away.
    pub max_backoff: Duration,
}

impl TemporalConfig {
    pub fn new(endpoint: TemporalEndpoint) -> Self {
        Self { endpoint, interval: Duration::from_secs(1), max_backoff: Duration::from_secs(60) }
    }
}

/// The name of the projection's tokens (one per fleet, minted by each
/// replica for a day and revoked when it stops).
const TOKEN_NAME: &str = "temporal";
const TOKEN_LIFETIME: Duration = Duration::from_secs(86_400);
const TOKEN_RENEW_AFTER: Duration = Duration::from_secs(43_200);

/// The identity the client announces to Temporal (no history ever holds
/// it: the client only reads).
pub const IDENTITY: &str = "work-ledger-projection";

pub struct TemporalProjection {
    ledger: Ledger,
    config: TemporalConfig,
    metrics: TemporalMetrics,
    reads: Option<TemporalReads>,
    tokens: HashMap<String, (Principal, Instant)>,
}

/// Runs of one workflow of one fleet, to project in the order they started.
type Followed = BTreeMap<(String, String, String), Vec<Run>>;

/// Workflows projected side by side in a pass.
const WORKFLOWS_AT_ONCE: usize = 16;

/// A followed workflow, its runs by start, and the token it is projected as.
struct Workflow {
    fleet: String,
    namespace: String,
    workflow_id: String,
    who: Principal,
    runs: Vec<Run>,
}

impl TemporalProjection {
    pub fn new(ledger: Ledger, config: TemporalConfig) -> Self {
        let metrics = TemporalMetrics::registered(ledger.metrics());
        Self { ledger, config, metrics, reads: None, tokens: HashMap::new() }
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
                    self.reads = None;
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
        for (principal, _) in self.tokens.values() {
            let _ = db::tokens::revoke(self.ledger.db(), principal.token_id).await;
        }
    }

    /// One pass over every followed workflow.
    pub async fn pass(&mut self) -> Result<(), String> {
        let reads = match &self.reads {
            Some(reads) => reads.clone(),
            None => {
                let reads = TemporalReads::connect(&self.config.endpoint, IDENTITY).await?;
                self.reads = Some(reads.clone());
                reads
            }
        };
        let followed = self.followed(&reads).await?;
        let marks = db::temporal::marks(self.ledger.db()).await.map_err(|e| e.to_string())?;
        let mut workflows = Vec::with_capacity(followed.len());
        for ((fleet, namespace, workflow_id), mut runs) in followed {
            runs.sort_by_key(|r| (r.started_us, r.run_id.clone()));
            let who = self.principal(&fleet).await?;
            workflows.push(Workflow { fleet, namespace, workflow_id, who, runs });
        }
        // A workflow's runs in order; WORKFLOWS_AT_ONCE workflows side by
        // side (each run is one history read and a few writes: one after
        // another, 1,000 open workflows made a pass of many seconds).
        let mut lag = 0.0_f64;
        for chunk in workflows.chunks(WORKFLOWS_AT_ONCE) {
            let lags = try_join_all(chunk.iter().map(|w| self.project_workflow(&reads, w, &marks))).await?;
            lag = lags.into_iter().fold(lag, f64::max);
        }
        self.metrics.lag.set(lag);
        Ok(())
    }

    /// Each run of `w` not closed yet, in order, from its mark; the
    /// largest lag seen.
    async fn project_workflow(
        &self,
        reads: &TemporalReads,
        w: &Workflow,
        marks: &db::temporal::Marks,
    ) -> Result<f64, String> {
        let mut lag = 0.0_f64;
        for found in &w.runs {
            let key = (w.fleet.clone(), w.namespace.clone(), w.workflow_id.clone(), found.run_id.clone());
            let (after, closed) = marks.get(&key).copied().unwrap_or((0, false));
            if closed {
                continue;
            }
            let target = run::Target { fleet: &w.fleet, namespace: &w.namespace, run: found, after };
            lag = lag.max(run::project(&self.ledger, reads, &w.who, &target, &self.metrics).await?);
        }
        Ok(lag)
    }

    /// The runs of every link's filter and of every open unit registered
    /// with a `workflowId` by hand, by fleet, namespace and workflow.
    async fn followed(&self, reads: &TemporalReads) -> Result<Followed, String> {
        let db = self.ledger.db();
        let mut followed = Followed::new();
        for link in db::temporal::links(db).await.map_err(|e| e.to_string())? {
            for found in reads.list(&link.namespace, &link.query).await? {
                let key = (link.fleet.clone(), link.namespace.clone(), found.workflow_id.clone());
                followed.entry(key).or_default().push(found);
            }
        }
        for unit in db::temporal::workflow_units(db, None, true).await.map_err(|e| e.to_string())? {
            let namespace = unit.namespace.unwrap_or_else(|| self.config.endpoint.namespace.clone());
            let key = (unit.fleet, namespace, unit.workflow_id);
            if followed.contains_key(&key) {
                continue;
            }
            let runs = reads.list(&key.1, &client::runs_of(&key.2)).await?;
            if !runs.is_empty() {
                followed.insert(key, runs);
            }
        }
        Ok(followed)
    }

    /// The projection's token for `fleet`: minted on first use, again
    /// before it expires.
    async fn principal(&mut self, fleet: &str) -> Result<Principal, String> {
        if let Some((who, minted)) = self.tokens.get(fleet)
            && minted.elapsed() < TOKEN_RENEW_AFTER
        {
            return Ok(who.clone());
        }
        let permissions = vec![Permission::UnitsRegister, Permission::UnitsClaim, Permission::UnitsProject];
        let who = auth::mint(self.ledger.db(), fleet, TOKEN_NAME, permissions, TOKEN_LIFETIME)
            .await
            .map_err(|e| format!("cannot mint the projection's token for fleet {fleet}: {e}"))?;
        if let Some((old, _)) = self.tokens.insert(fleet.to_owned(), (who.clone(), Instant::now())) {
            let _ = db::tokens::revoke(self.ledger.db(), old.token_id).await;
        }
        Ok(who)
    }
}
