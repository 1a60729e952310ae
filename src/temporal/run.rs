//! One run's history projected past its mark: each event that means
//! something to the ledger becomes one write (two or three for a completion
//! that verifies and disposes), keyed by the event; the others move the mark
//! alone.

use chrono::Utc;
use sea_orm::Value;
use serde_json::json;
use uuid::Uuid;

use super::client::{Run, TemporalReads};
use super::mapping::{self, Outcome, Step};
use super::metrics::TemporalMetrics;
use crate::auth::Principal;
use crate::db;
use crate::db::writes::function;
use crate::ledger::{Ledger, Projected, RegisterUnit, RunMark};

/// The run to project, and the last event projected before.
pub struct Target<'a> {
    pub fleet: &'a str,
    pub namespace: &'a str,
    pub run: &'a Run,
    pub after: i64,
}

/// The lease the claim is asked for: the claim checks it before it sees
/// that a workflow holds the unit without one.
const CLAIM_LEASE: i32 = 900;

/// Longest reason the ledger keeps (SPEC §9).
const MAX_REASON: usize = 8000;

/// Projects `target`'s new events; returns how far behind the oldest of
/// them was (seconds from Temporal's event time to now; 0: none new).
pub async fn project(
    ledger: &Ledger,
    reads: &TemporalReads,
    who: &Principal,
    target: &Target<'_>,
    metrics: &TemporalMetrics,
) -> Result<f64, String> {
    let run = target.run;
    // The whole history (Temporal reads it from the start anyway): what an
    // event means may depend on the events before the mark (the run's first
    // activity start is the one that moves the unit to IN_PROGRESS).
    let history = reads.history(target.namespace, &run.workflow_id, &run.run_id).await?;
    let first_start = history.iter().find(|e| mapping::step(e) == Step::ActivityStarted).map(|e| e.event_id);
    let events: Vec<_> = history.into_iter().filter(|e| e.event_id > target.after).collect();
    let Some(first) = events.first() else { return Ok(0.0) };
    let lag = first
        .event_time
        .map(|t| (Utc::now().timestamp_micros() - (t.seconds * 1_000_000 + i64::from(t.nanos) / 1000)) as f64 / 1e6)
        .unwrap_or(0.0)
        .max(0.0);
    let db = ledger.db();
    let unit_id = match db::temporal::unit_of(db, target.fleet, &run.workflow_id).await.map_err(err)? {
        Some((unit, _)) => unit,
        None => register(ledger, who, target.fleet, &run.workflow_id).await?.0,
    };
    let mut projector = Projector { ledger, who, target, unit_id, first_start, completing: false, metrics };
    let last = events.len() - 1;
    for (i, event) in events.iter().enumerate() {
        let step = mapping::step(event);
        let closing = matches!(step, Step::Completed(_) | Step::Ended(..));
        if step == Step::Skipped || (step == Step::ActivityStarted && first_start != Some(event.event_id)) {
            metrics.skipped.inc();
            if i == last {
                projector.mark_only(event.event_id, closing).await?;
            }
            continue;
        }
        projector.step(event.event_id, step, closing).await?;
    }
    Ok(lag)
}

struct Projector<'a> {
    ledger: &'a Ledger,
    who: &'a Principal,
    target: &'a Target<'a>,
    unit_id: Uuid,
    /// The run's first `ActivityTaskStarted`, which moved the unit to
    /// IN_PROGRESS (none: no activity started).
    first_start: Option<i64>,
    /// Projecting a completion (several writes for one event).
    completing: bool,
    metrics: &'a TemporalMetrics,
}

impl Projector<'_> {
    async fn step(&mut self, event_id: i64, step: Step, closing: bool) -> Result<(), String> {
        let unit = self.unit_id;
        match step {
            Step::Started => {
                let args = json!({"unitId": unit, "leaseSeconds": CLAIM_LEASE});
                let values = vec![CLAIM_LEASE.into(), Value::String(None), unit.into()];
                self.write(event_id, "", function::CLAIM, "claimUnit", &args, values, closing).await
            }
            Step::ActivityStarted => self.start(event_id, "", closing).await,
            Step::Cost(cents) => self.cost(event_id, "", cents, closing).await,
            Step::Completed(outcome) => {
                self.completing = true;
                let done = self.completed(event_id, outcome).await;
                self.completing = false;
                done
            }
            Step::Ended(ended, reason) => self.release(event_id, ended.outcome(), &reason, true).await,
            Step::Skipped => self.mark_only(event_id, closing).await,
        }
    }

    /// `WorkflowExecutionCompleted`: its cost, then VERIFIED with its
    /// evidence and the disposition it names, or FAILED without evidence.
    /// The writes before its last mark the event before it: a pass that
    /// stops between them projects the event again, and the writes done
    /// replay.
    async fn completed(&mut self, event_id: i64, outcome: Outcome) -> Result<(), String> {
        if let Some(cents) = outcome.cost_cents {
            self.cost(event_id, ":cost", cents, false).await?;
        }
        let (Some(first), Some(last)) = (outcome.evidence_urls.first(), outcome.evidence_urls.last()) else {
            return self.release(event_id, "failed", mapping::WITHOUT_EVIDENCE, true).await;
        };
        if self.first_start.is_none_or(|start| start > event_id) {
            self.start(event_id, ":start", false).await?;
        }
        let unit = self.unit_id;
        let args = json!({"unitId": unit, "to": "VERIFIED", "evidenceUrl": first});
        let values = vec![unit.into(), Value::Uuid(None), "verified".into(), first.clone().into()];
        let disposed = outcome.disposition.is_some();
        self.write(event_id, "", function::TRANSITION, "transition", &args, values, !disposed).await?;
        let Some(disposition) = outcome.disposition else { return Ok(()) };
        let args =
            json!({"unitId": unit, "disposition": disposition.as_sql(), "evidenceUrl": last, "reason": outcome.reason});
        let values = vec![
            unit.into(),
            Value::Uuid(None),
            disposition.as_sql().into(),
            last.clone().into(),
            outcome.reason.map(|r| bounded(&r)).into(),
        ];
        self.write(event_id, ":dispose", function::DISPOSE, "dispose", &args, values, true).await
    }

    async fn start(&mut self, event_id: i64, suffix: &str, closing: bool) -> Result<(), String> {
        let unit = self.unit_id;
        let args = json!({"unitId": unit, "to": "IN_PROGRESS"});
        let values = vec![unit.into(), Value::Uuid(None), "in_progress".into(), Value::String(None)];
        self.write(event_id, suffix, function::TRANSITION, "transition", &args, values, closing).await
    }

    async fn cost(&mut self, event_id: i64, suffix: &str, cents: i64, closing: bool) -> Result<(), String> {
        let unit = self.unit_id;
        let args = json!({"unitId": unit, "cents": cents});
        let values = vec![Value::Uuid(None), unit.into(), cents.into()];
        self.write(event_id, suffix, function::RECORD_COST, "recordCost", &args, values, closing).await
    }

    async fn release(&mut self, event_id: i64, outcome: &str, reason: &str, closing: bool) -> Result<(), String> {
        let unit = self.unit_id;
        let reason = bounded(reason);
        let args = json!({"unitId": unit, "outcome": outcome, "reason": reason});
        let values = vec![unit.into(), Value::Uuid(None), outcome.into(), reason.into()];
        self.write(event_id, "", function::RELEASE, "release", &args, values, closing).await
    }

    /// One write keyed by the event (and `suffix`, for the second and third
    /// write of one event), with the run's mark.
    #[allow(clippy::too_many_arguments)]
    async fn write(
        &mut self,
        event_id: i64,
        suffix: &str,
        function: &'static str,
        operation: &'static str,
        args: &serde_json::Value,
        values: Vec<Value>,
        closing: bool,
    ) -> Result<(), String> {
        let run = self.target.run;
        let key = format!("temporal:{}:{}:{}:{event_id}{suffix}", self.target.namespace, run.workflow_id, run.run_id);
        let write = Projected { function, operation, key: key.clone(), args, values };
        // The completion's writes but its last leave the mark before it.
        let whole = closing || !self.completing;
        let mark = if whole { self.mark(event_id, closing) } else { self.mark(event_id - 1, false) };
        match self.ledger.project(self.who, write, &mark).await.map_err(err)? {
            Ok((result, _)) if result == "replayed" => {}
            Ok(_) => {
                self.metrics.projected.inc();
            }
            Err(refused) => {
                self.metrics.skipped.inc();
                tracing::warn!(key, unit = %self.unit_id, code = refused.code(), "Temporal projection: the ledger refused an event; it is recorded as skipped");
            }
        }
        Ok(())
    }

    async fn mark_only(&self, event_id: i64, closing: bool) -> Result<(), String> {
        self.ledger.mark_run(self.who, &self.mark(event_id, closing)).await.map_err(err)
    }

    fn mark(&self, event_id: i64, closed: bool) -> RunMark {
        let run = self.target.run;
        RunMark {
            namespace: self.target.namespace.to_owned(),
            workflow_id: run.workflow_id.clone(),
            run_id: run.run_id.clone(),
            unit_id: self.unit_id,
            event_id,
            closed,
        }
    }
}

/// Registers the unit of a new workflow a link matched (its `externalRef`
/// is the workflow id).
async fn register(ledger: &Ledger, who: &Principal, fleet: &str, workflow_id: &str) -> Result<(Uuid, String), String> {
    let unit =
        RegisterUnit { external_ref: workflow_id.to_owned(), domain: None, workflow_id: Some(workflow_id.to_owned()) };
    ledger.register_units(who, vec![unit]).await.map_err(err)?;
    db::temporal::unit_of(ledger.db(), fleet, workflow_id)
        .await
        .map_err(err)?
        .ok_or_else(|| format!("workflow {workflow_id}: its ref is a unit of fleet {fleet} without that workflowId"))
}

/// A reason within SPEC §9's bounds: at most 8000 characters, no control
/// characters but line breaks and tabs.
fn bounded(reason: &str) -> String {
    reason.chars().filter(|c| !c.is_control() || matches!(c, '\n' | '\t')).take(MAX_REASON).collect()
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}
