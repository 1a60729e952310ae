//! One run followed from its first event to its close: each event that
//! means something to the ledger becomes one write (two or three for a
//! completion that verifies and disposes), keyed by the event, in the
//! transaction that moves the run's mark; the others record nothing.

use chrono::Utc;
use sea_orm::Value;
use serde_json::json;
use temporalio_common::protos::temporal::api::history::v1::HistoryEvent;
use temporalio_common::protos::temporal::api::history::v1::history_event::Attributes;
use uuid::Uuid;

use super::follow::Context;
use super::mapping::{self, Outcome, Step};
use super::metrics::TemporalMetrics;
use crate::auth::Principal;
use crate::db;
use crate::ledger::{Ledger, Projected, RegisterUnit, RunMark, claims, lifecycle};

/// The run to follow, and the last event projected before.
pub struct Target<'a> {
    pub fleet: &'a str,
    pub namespace: &'a str,
    pub workflow_id: &'a str,
    pub run_id: &'a str,
    pub after: i64,
}

/// The lease the claim is asked for: the claim checks it before it sees
/// that a workflow holds the unit without one.
const CLAIM_LEASE: i32 = 900;

/// Longest reason the ledger keeps (SPEC §9).
const MAX_REASON: usize = 8000;

/// Reads `target`'s history page after page, each as soon as Temporal has
/// it, and projects the events past its mark, until the run is closed;
/// returns the run that carries the workflow on (continued as new, retried
/// or the next cron run), if the closing event names one.
pub async fn follow(ctx: &Context, target: &Target<'_>) -> Result<Option<String>, String> {
    let mut token = Vec::new();
    let mut after = target.after;
    // What an event means may depend on the events before the mark (the
    // run's first activity start is the one that moves the unit to
    // IN_PROGRESS), so the history is read from its first event.
    let mut first_start = None;
    let mut unit_id = None;
    loop {
        let page = ctx.reads.history_page(target.namespace, target.workflow_id, target.run_id, token).await?;
        for event in &page.events {
            if first_start.is_none() && mapping::step(event) == Step::ActivityStarted {
                first_start = Some(event.event_id);
            }
        }
        let new: Vec<&HistoryEvent> = page.events.iter().filter(|e| e.event_id > after).collect();
        if let Some(last) = new.last() {
            after = last.event_id;
            let unit = match unit_id {
                Some(unit) => unit,
                None => *unit_id.insert(unit_of(ctx, target).await?),
            };
            ctx.saw_lag(lag_of(new[0]));
            let _writing = ctx.writers.acquire().await.map_err(err)?;
            let who = ctx.who(target.fleet).await?;
            let mut projector = Projector {
                ledger: &ctx.ledger,
                who: &who,
                target,
                unit_id: unit,
                first_start,
                completing: false,
                metrics: &ctx.metrics,
            };
            for event in new {
                let step = mapping::step(event);
                if step == Step::Skipped || (step == Step::ActivityStarted && first_start != Some(event.event_id)) {
                    ctx.metrics.skipped.inc();
                    continue;
                }
                let closing = matches!(step, Step::Completed(_) | Step::Ended(..));
                projector.step(event.event_id, step, closing).await?;
            }
        }
        if page.next.is_empty() {
            return Ok(page.events.last().and_then(next_run));
        }
        token = page.next;
    }
}

/// Seconds from Temporal's time of `event` to now.
fn lag_of(event: &HistoryEvent) -> f64 {
    event
        .event_time
        .map(|t| (Utc::now().timestamp_micros() - (t.seconds * 1_000_000 + i64::from(t.nanos) / 1000)) as f64 / 1e6)
        .unwrap_or(0.0)
        .max(0.0)
}

/// The run a closing event hands the workflow to.
fn next_run(event: &HistoryEvent) -> Option<String> {
    let next = match event.attributes.as_ref()? {
        Attributes::WorkflowExecutionContinuedAsNewEventAttributes(a) => &a.new_execution_run_id,
        Attributes::WorkflowExecutionFailedEventAttributes(a) => &a.new_execution_run_id,
        Attributes::WorkflowExecutionTimedOutEventAttributes(a) => &a.new_execution_run_id,
        Attributes::WorkflowExecutionCompletedEventAttributes(a) => &a.new_execution_run_id,
        _ => return None,
    };
    Some(next.clone()).filter(|n| !n.is_empty())
}

/// The unit the run's workflow is, registered on first sight.
async fn unit_of(ctx: &Context, target: &Target<'_>) -> Result<Uuid, String> {
    if let Some(unit) = db::temporal::unit_of(ctx.ledger.db(), target.fleet, target.workflow_id).await.map_err(err)? {
        return Ok(unit);
    }
    let who = ctx.who(target.fleet).await?;
    let units = ctx.ledger.register_units(&who, vec![workflow_unit(target.workflow_id)]).await.map_err(err)?;
    units.into_iter().find(|u| u.workflow_id.as_deref() == Some(target.workflow_id)).map(|u| u.id).ok_or_else(|| {
        format!("workflow {}: its ref is a unit of fleet {} without that workflowId", target.workflow_id, target.fleet)
    })
}

/// The unit a workflow a link found is registered as: its `externalRef`
/// and `workflowId` are the workflow id.
pub fn workflow_unit(workflow_id: &str) -> RegisterUnit {
    RegisterUnit { external_ref: workflow_id.to_owned(), domain: None, workflow_id: Some(workflow_id.to_owned()) }
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
                self.write(event_id, "", claims::CLAIM, "claimUnit", &args, values, closing).await
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
            Step::Skipped => Ok(()),
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
        self.write(event_id, "", lifecycle::TRANSITION, "transition", &args, values, !disposed).await?;
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
        self.write(event_id, ":dispose", lifecycle::DISPOSE, "dispose", &args, values, true).await
    }

    async fn start(&mut self, event_id: i64, suffix: &str, closing: bool) -> Result<(), String> {
        let unit = self.unit_id;
        let args = json!({"unitId": unit, "to": "IN_PROGRESS"});
        let values = vec![unit.into(), Value::Uuid(None), "in_progress".into(), Value::String(None)];
        self.write(event_id, suffix, lifecycle::TRANSITION, "transition", &args, values, closing).await
    }

    async fn cost(&mut self, event_id: i64, suffix: &str, cents: i64, closing: bool) -> Result<(), String> {
        let unit = self.unit_id;
        let args = json!({"unitId": unit, "cents": cents});
        let values = vec![Value::Uuid(None), unit.into(), cents.into()];
        self.write(event_id, suffix, lifecycle::RECORD_COST, "recordCost", &args, values, closing).await
    }

    async fn release(&mut self, event_id: i64, outcome: &str, reason: &str, closing: bool) -> Result<(), String> {
        let unit = self.unit_id;
        let reason = bounded(reason);
        let args = json!({"unitId": unit, "outcome": outcome, "reason": reason});
        let values = vec![unit.into(), Value::Uuid(None), outcome.into(), reason.into()];
        self.write(event_id, "", lifecycle::RELEASE, "release", &args, values, closing).await
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
        let t = self.target;
        let key = format!("temporal:{}:{}:{}:{event_id}{suffix}", t.namespace, t.workflow_id, t.run_id);
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

    fn mark(&self, event_id: i64, closed: bool) -> RunMark {
        let t = self.target;
        RunMark {
            namespace: t.namespace.to_owned(),
            workflow_id: t.workflow_id.to_owned(),
            run_id: t.run_id.to_owned(),
            unit_id: self.unit_id,
            event_id,
            closed,
        }
    }
}

/// A reason within SPEC §9's bounds: at most 8000 characters, no control
/// characters but line breaks and tabs.
fn bounded(reason: &str) -> String {
    reason.chars().filter(|c| !c.is_control() || matches!(c, '\n' | '\t')).take(MAX_REASON).collect()
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}
