//! `work-ledger import FILE|-`: a backlog, in CSV (a header row naming
//! `externalRef`, optionally `domain` and `workflowId`) or JSON Lines (one
//! object per line with the same keys), registered in batches through
//! [`Ledger::register_units`], the code behind `registerUnits`.
//!
//! It talks to the database directly, like the token commands: importing a
//! backlog is an operator's job done where the database is reachable, with
//! no server or token needed, and it still runs as the application role
//! under the fleet's row-level security, with the same validation and the
//! same `registered` events as the mutation.
//!
//! Idempotent by `(fleet, externalRef)`: a second run inserts nothing and
//! says so. Each line is checked on its own, so a bad line is reported with
//! its number and reason and never loses the others.

use std::collections::HashSet;
use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use std::time::Duration;

use serde::Deserialize;

use crate::auth::{self, Permission, Principal};
use crate::db;
use crate::ledger::{Ledger, LedgerError, RegisterUnit, validate};

/// Units per `register_units` call (its limit, SPEC §9).
const BATCH: usize = validate::MAX_REGISTER_BATCH;

/// What the file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Csv,
    Jsonl,
}

impl Format {
    /// From the file name, else from the first character (`{` is JSON Lines).
    pub fn detect(path: &str, text: &str) -> Self {
        let lower = path.to_lowercase();
        if lower.ends_with(".jsonl") || lower.ends_with(".ndjson") || lower.ends_with(".json") {
            return Self::Jsonl;
        }
        if lower.ends_with(".csv") {
            return Self::Csv;
        }
        if text.trim_start().starts_with('{') { Self::Jsonl } else { Self::Csv }
    }
}

/// One line of the backlog.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Line {
    #[serde(alias = "external_ref")]
    external_ref: String,
    domain: Option<String>,
    #[serde(alias = "workflow_id")]
    workflow_id: Option<String>,
}

/// A line that was not imported: its number (1-based, as an editor shows
/// it) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub line: usize,
    pub reason: String,
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Summary {
    pub inserted: usize,
    pub already_present: usize,
    pub refused: Vec<Refused>,
    pub dry_run: bool,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verb = if self.dry_run { "would insert" } else { "inserted" };
        write!(
            f,
            "{verb} {}, already present {}, refused {}",
            self.inserted,
            self.already_present,
            self.refused.len()
        )?;
        if self.inserted == 0 && self.refused.is_empty() && !self.dry_run {
            write!(f, " (nothing new to import)")?;
        }
        for refused in &self.refused {
            write!(f, "\n  line {}: {}", refused.line, refused.reason)?;
        }
        Ok(())
    }
}

/// Parses `text` into units to register, each with its line number, and
/// the lines refused on their own.
fn parse(text: &str, format: Format) -> (Vec<(usize, RegisterUnit)>, Vec<Refused>) {
    let mut units = Vec::new();
    let mut refused = Vec::new();
    let mut accept = |line: usize, parsed: Result<Line, String>| match parsed.and_then(check) {
        Ok(unit) => units.push((line, unit)),
        Err(reason) => refused.push(Refused { line, reason }),
    };
    match format {
        Format::Jsonl => {
            for (i, raw) in text.lines().enumerate() {
                if raw.trim().is_empty() {
                    continue;
                }
                accept(i + 1, serde_json::from_str::<Line>(raw).map_err(|e| format!("not a unit object: {e}")));
            }
        }
        Format::Csv => {
            let mut reader = csv::ReaderBuilder::new().flexible(false).from_reader(text.as_bytes());
            let headers = match reader.headers() {
                Ok(headers) => headers.clone(),
                Err(e) => return (units, vec![Refused { line: 1, reason: format!("unreadable header row: {e}") }]),
            };
            for record in reader.records() {
                match record {
                    Ok(record) => {
                        let line = record.position().map_or(0, |p| p.line() as usize);
                        accept(line, record.deserialize::<Line>(Some(&headers)).map_err(|e| format!("{e}")));
                    }
                    Err(e) => {
                        let line = e.position().map_or(0, |p| p.line() as usize);
                        accept(line, Err(format!("{e}")));
                    }
                }
            }
        }
    }
    (units, refused)
}

/// The rules `registerUnits` applies, line by line.
fn check(line: Line) -> Result<RegisterUnit, String> {
    let rule = |r: Result<(), LedgerError>| r.map_err(|e| e.to_string());
    // An empty CSV cell is an absent value.
    let line = Line {
        domain: line.domain.filter(|d| !d.is_empty()),
        workflow_id: line.workflow_id.filter(|w| !w.is_empty()),
        ..line
    };
    rule(validate::external_ref("externalRef", &line.external_ref))?;
    if let Some(domain) = &line.domain {
        rule(validate::label("domain", domain))?;
    }
    if let Some(workflow) = &line.workflow_id {
        rule(validate::label("workflowId", workflow))?;
    }
    Ok(RegisterUnit { external_ref: line.external_ref, domain: line.domain, workflow_id: line.workflow_id })
}

/// Imports `text` into `fleet`. A progress bar shows on a terminal.
pub async fn run(
    ledger: &Ledger,
    fleet: &str,
    text: &str,
    format: Format,
    dry_run: bool,
) -> Result<Summary, LedgerError> {
    let (units, refused) = parse(text, format);
    // The import registers as a token of its own, like every write (a day
    // is far more than an import takes; it is revoked when the import ends).
    let permissions = vec![Permission::LedgerRead, Permission::UnitsRegister];
    let who = auth::mint(ledger.db(), fleet, "import", permissions, Duration::from_secs(86_400)).await?;
    let summary = import_all(ledger, &who, units, refused, dry_run).await;
    db::tokens::revoke(ledger.db(), who.token_id).await?;
    summary
}

async fn import_all(
    ledger: &Ledger,
    who: &Principal,
    units: Vec<(usize, RegisterUnit)>,
    refused: Vec<Refused>,
    dry_run: bool,
) -> Result<Summary, LedgerError> {
    let mut summary = Summary { refused, dry_run, ..Summary::default() };
    let progress = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(units.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} units {per_sec} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    // A ref twice in one file is one unit: the later lines are already present.
    let mut seen = HashSet::new();
    let mut pending: Vec<RegisterUnit> = Vec::with_capacity(BATCH);
    for (_, unit) in units {
        if !seen.insert(unit.external_ref.clone()) {
            summary.already_present += 1;
            progress.inc(1);
            continue;
        }
        pending.push(unit);
        if pending.len() == BATCH {
            import_batch(ledger, who, std::mem::take(&mut pending), dry_run, &mut summary).await?;
            progress.inc(BATCH as u64);
        }
    }
    let rest = pending.len() as u64;
    if !pending.is_empty() {
        import_batch(ledger, who, pending, dry_run, &mut summary).await?;
    }
    progress.inc(rest);
    progress.finish_and_clear();
    summary.refused.sort_by_key(|r| r.line);
    Ok(summary)
}

async fn import_batch(
    ledger: &Ledger,
    who: &Principal,
    batch: Vec<RegisterUnit>,
    dry_run: bool,
    summary: &mut Summary,
) -> Result<(), LedgerError> {
    let refs: Vec<String> = batch.iter().map(|u| u.external_ref.clone()).collect();
    let present = ledger.existing_refs(who, refs).await?.len();
    summary.already_present += present;
    summary.inserted += batch.len() - present;
    // A batch that is all present has nothing to write (a re-run).
    if !dry_run && present < batch.len() {
        ledger.register_units(who, batch).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_formats_and_refuses_bad_lines_on_their_own() {
        let csv = "externalRef,domain\nA/1,billing\n,billing\n\"B,2\",payroll\nC/3\n";
        let (units, refused) = parse(csv, Format::Csv);
        let refs: Vec<&str> = units.iter().map(|(_, u)| u.external_ref.as_str()).collect();
        assert_eq!(refs, ["A/1", "B,2"]);
        assert_eq!(refused.iter().map(|r| r.line).collect::<Vec<_>>(), [3, 5]);

        let jsonl = "{\"externalRef\": \"X\"}\n\nnot json\n{\"externalRef\": \"Y\", \"domain\": \"d\", \"workflowId\": \"w\"}\n{\"ref\": 1}\n";
        let (units, refused) = parse(jsonl, Format::Jsonl);
        assert_eq!(units.iter().map(|(l, _)| *l).collect::<Vec<_>>(), [1, 4]);
        assert_eq!(refused.iter().map(|r| r.line).collect::<Vec<_>>(), [3, 5]);
        assert_eq!(Format::detect("-", "  {\"a\":1}"), Format::Jsonl);
        assert_eq!(Format::detect("backlog.csv", "{"), Format::Csv);
    }
}
