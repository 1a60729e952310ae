//! `work-ledger temporal link|unlink|links` (which workflows become units
//! of a fleet) and `work-ledger audit --temporal` (SPEC §12, O4): every
//! workflow-modelled unit compared with Temporal's status of its workflow's
//! current run, read-only on both sides; it never fixes anything.

use sea_orm::DatabaseConnection;

use super::AnyError;
use crate::db::temporal::{self as links, Link, WorkflowUnit};
use crate::temporal::{IDENTITY, TemporalEndpoint, TemporalReads};

pub async fn link(db: &DatabaseConnection, link: Link) -> Result<(), AnyError> {
    let added = links::link(db, &link).await?;
    let verb = if added { "linked" } else { "already linked" };
    eprintln!(
        "{verb}: new workflows of namespace `{}` matching `{}` become units of fleet `{}`",
        link.namespace, link.query, link.fleet
    );
    Ok(())
}

pub async fn unlink(db: &DatabaseConnection, link: Link) -> Result<(), AnyError> {
    if !links::unlink(db, &link).await? {
        return Err(format!(
            "fleet `{}` has no link to `{}` in namespace `{}`",
            link.fleet, link.query, link.namespace
        )
        .into());
    }
    eprintln!("unlinked; the units it registered stay, and their workflows' runs are still projected");
    Ok(())
}

pub async fn print_links(db: &DatabaseConnection) -> Result<(), AnyError> {
    for l in links::links(db).await? {
        println!("{}\t{}\t{}", l.fleet, l.namespace, l.query);
    }
    Ok(())
}

/// A unit whose ledger state disagrees with Temporal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub fleet: String,
    pub unit_id: uuid::Uuid,
    pub state: String,
    pub temporal_status: String,
    pub last_projected: String,
}

/// `audit --temporal`: prints each mismatch; an error (exit 1) when any.
pub async fn audit(db: &DatabaseConnection, endpoint: &TemporalEndpoint, fleet: Option<&str>) -> Result<(), AnyError> {
    let reads = TemporalReads::connect(endpoint, IDENTITY)
        .await
        .map_err(|e| format!("Temporal at {}: {e}", endpoint.address))?;
    let units = links::workflow_units(db, fleet).await?;
    let mut mismatches = Vec::new();
    for unit in &units {
        let namespace = unit.namespace.clone().unwrap_or_else(|| endpoint.namespace.clone());
        let status = reads.current_status(&namespace, &unit.workflow_id).await?;
        if !agrees(unit, status.as_deref()) {
            mismatches.push(Mismatch {
                fleet: unit.fleet.clone(),
                unit_id: unit.id,
                state: unit.state.to_uppercase(),
                temporal_status: status.unwrap_or_else(|| "NotFound".to_owned()),
                last_projected: unit.last_projected.clone().unwrap_or_else(|| "-".to_owned()),
            });
        }
    }
    for m in &mismatches {
        println!(
            "{}\t{}\tledger {}\ttemporal {}\tlast projected {}",
            m.fleet, m.unit_id, m.state, m.temporal_status, m.last_projected
        );
    }
    if mismatches.is_empty() {
        eprintln!("audit --temporal clean: {} workflow-modelled unit(s) agree with Temporal", units.len());
        Ok(())
    } else {
        Err(format!("audit --temporal found {} unit(s) that disagree with Temporal", mismatches.len()).into())
    }
}

/// Whether `unit` agrees with the status of its workflow's current run
/// (`None`: Temporal has no run of it).
fn agrees(unit: &WorkflowUnit, status: Option<&str>) -> bool {
    let state = unit.state.as_str();
    let outcome = unit.last_outcome.as_deref();
    let terminal = matches!(state, "done" | "abandoned");
    match status {
        // Retention: Temporal forgot a finished workflow, the ledger keeps it.
        None => terminal || (state == "ready" && outcome.is_none()),
        Some("Running") => matches!(state, "claimed" | "in_progress" | "blocked"),
        Some("Completed") => matches!(state, "verified" | "done" | "abandoned") || outcome == Some("failed"),
        Some("Failed" | "TimedOut") => outcome == Some("failed") || terminal,
        Some("Terminated" | "Canceled") => outcome == Some("abandoned") || terminal,
        Some("ContinuedAsNew") => outcome == Some("superseded"),
        Some(_) => false,
    }
}
