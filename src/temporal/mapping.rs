//! What each Temporal history event becomes in the ledger (SPEC §12). Every
//! event type not named here is skipped (and counted), so a newer server's
//! events do no harm.

use serde_json::Value;
use temporalio_common::protos::temporal::api::common::v1::Payloads;
use temporalio_common::protos::temporal::api::history::v1::HistoryEvent;
use temporalio_common::protos::temporal::api::history::v1::history_event::Attributes;

use crate::db::entities::Disposition;

/// How a run's attempt ends when the run ends without verified evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Failed,
    Abandoned,
    Superseded,
}

impl Ended {
    /// The outcome as `ledger_release` takes it.
    pub fn outcome(self) -> &'static str {
        match self {
            Self::Failed => "failed",
            Self::Abandoned => "abandoned",
            Self::Superseded => "superseded",
        }
    }
}

/// What a workflow's result says it did (`WorkflowExecutionCompleted`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub evidence_urls: Vec<String>,
    pub cost_cents: Option<i64>,
    pub disposition: Option<Disposition>,
    pub reason: Option<String>,
}

/// One history event, as the ledger sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// `WorkflowExecutionStarted`: the run's attempt begins (a claim).
    Started,
    /// `ActivityTaskStarted`: the first moves the unit to IN_PROGRESS.
    ActivityStarted,
    /// `ActivityTaskCompleted` with a `costCents` in its result.
    Cost(i64),
    /// `WorkflowExecutionCompleted`.
    Completed(Outcome),
    /// The run ended otherwise; the reason is the attempt's `endReason`.
    Ended(Ended, String),
    /// Nothing the ledger records (an activity without a cost, a timer, a
    /// workflow task, a type this build does not know).
    Skipped,
}

/// The reason of a run that completed without evidence (SPEC §12).
pub const WITHOUT_EVIDENCE: &str = "completed without evidence";

pub fn step(event: &HistoryEvent) -> Step {
    let Some(attributes) = &event.attributes else { return Step::Skipped };
    match attributes {
        Attributes::WorkflowExecutionStartedEventAttributes(_) => Step::Started,
        Attributes::ActivityTaskStartedEventAttributes(_) => Step::ActivityStarted,
        Attributes::ActivityTaskCompletedEventAttributes(a) => {
            match json(a.result.as_ref()).as_ref().and_then(|r| r.get("costCents")).and_then(Value::as_i64) {
                Some(cents) => Step::Cost(cents),
                None => Step::Skipped,
            }
        }
        Attributes::WorkflowExecutionCompletedEventAttributes(a) => Step::Completed(outcome(json(a.result.as_ref()))),
        Attributes::WorkflowExecutionFailedEventAttributes(a) => {
            let message = a.failure.as_ref().map(|f| f.message.clone()).filter(|m| !m.trim().is_empty());
            Step::Ended(Ended::Failed, message.unwrap_or_else(|| "workflow failed".to_owned()))
        }
        Attributes::WorkflowExecutionTimedOutEventAttributes(_) => {
            Step::Ended(Ended::Failed, "workflow timed out".to_owned())
        }
        Attributes::WorkflowExecutionTerminatedEventAttributes(a) => {
            let reason = Some(a.reason.clone()).filter(|r| !r.trim().is_empty());
            Step::Ended(Ended::Abandoned, reason.unwrap_or_else(|| "workflow terminated".to_owned()))
        }
        Attributes::WorkflowExecutionCanceledEventAttributes(_) => {
            Step::Ended(Ended::Abandoned, "workflow canceled".to_owned())
        }
        Attributes::WorkflowExecutionContinuedAsNewEventAttributes(a) => {
            Step::Ended(Ended::Superseded, format!("continued as new run {}", a.new_execution_run_id))
        }
        _ => Step::Skipped,
    }
}

/// The first payload of `payloads` as JSON (the SDKs' default encoding).
fn json(payloads: Option<&Payloads>) -> Option<Value> {
    let payload = payloads?.payloads.first()?;
    serde_json::from_slice(&payload.data).ok()
}

/// A workflow's result: `evidenceUrls` (one link or a list), `costCents`,
/// `disposition` (`MIGRATED`, `DROPPED`, `DEFERRED`, `DEAD`) and `reason`.
fn outcome(result: Option<Value>) -> Outcome {
    let Some(Value::Object(result)) = result else { return Outcome::default() };
    let evidence_urls = match result.get("evidenceUrls") {
        Some(Value::String(url)) => vec![url.clone()],
        Some(Value::Array(urls)) => urls.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    let disposition = result.get("disposition").and_then(Value::as_str).and_then(|d| {
        [Disposition::Migrated, Disposition::Dropped, Disposition::Deferred, Disposition::Dead]
            .into_iter()
            .find(|known| known.as_sql().eq_ignore_ascii_case(d))
    });
    Outcome {
        evidence_urls,
        cost_cents: result.get("costCents").and_then(Value::as_i64),
        disposition,
        reason: result.get("reason").and_then(Value::as_str).map(str::to_owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_names_evidence_cost_and_disposition() {
        let result = serde_json::json!({"evidenceUrls": ["https://e/1"], "costCents": 7, "disposition": "DROPPED", "reason": "r"});
        let o = outcome(Some(result));
        assert_eq!(o.evidence_urls, vec!["https://e/1".to_owned()]);
        assert_eq!(
            (o.cost_cents, o.disposition, o.reason.as_deref()),
            (Some(7), Some(Disposition::Dropped), Some("r"))
        );
        assert_eq!(outcome(Some(serde_json::json!("done"))), Outcome::default());
    }
}
