//! `work-ledger projections status` and `projections rebuild [NAME]`: where
//! each read model's fold stands (its mark, the events past it and how old
//! the oldest is, whether its definition is current), and a rebuild from the
//! whole log with a progress bar. A rebuild empties the projection and moves
//! its mark back to the start (one transaction), then folds the log again in
//! steps, as the projector does: reads stay exact throughout, each adding
//! whatever is not folded yet.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use sea_orm::{ConnectionTrait, DatabaseConnection};

use super::AnyError;
use crate::db::stmt;
use crate::projector::status;

/// Events folded per step of a rebuild (one transaction each).
const STEP_EVENTS: i32 = 50_000;

/// The status table: one line per projection.
pub async fn print_status(db: &DatabaseConnection) -> Result<(), AnyError> {
    println!("projection\tmark\tbehind\tlag_seconds\tfolded_events\tdefinition");
    for s in status::all(db).await? {
        let definition = if s.current { "current" } else { "changed: rebuilt by the next migrate" };
        println!("{}\t{}\t{}\t{:.3}\t{}\t{definition}", s.name, s.mark, s.behind, s.lag_seconds, s.folded_events);
    }
    Ok(())
}

/// Rebuilds `name`, or every projection, from the whole log.
pub async fn rebuild(db: &DatabaseConnection, name: Option<&str>) -> Result<(), AnyError> {
    let known = status::names(db).await?;
    let names: Vec<String> = match name {
        Some(name) if known.iter().any(|n| n == name) => vec![name.to_owned()],
        Some(name) => {
            return Err(format!("no projection named `{name}`; the projections are {}", known.join(", ")).into());
        }
        None => known,
    };
    for name in names {
        let total = db
            .query_one_raw(stmt("SELECT count(*) AS n FROM work_unit_events", []))
            .await?
            .map(|row| row.try_get::<i64>("", "n"))
            .transpose()?
            .unwrap_or(0);
        let bar = if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(total.max(0) as u64);
            bar.set_style(
                ProgressStyle::with_template("{prefix:>12} {bar:40} {pos}/{len} events {per_sec} eta {eta}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.set_prefix(name.clone());
            bar
        } else {
            ProgressBar::hidden()
        };
        db.execute_raw(stmt("SELECT ledger_project_reset($1)", [name.as_str().into()])).await?;
        let mut folded = 0u64;
        loop {
            let step = db
                .query_one_raw(stmt("SELECT ledger_project($1, $2) AS n", [name.as_str().into(), STEP_EVENTS.into()]))
                .await?
                .map(|row| row.try_get::<Option<i64>>("", "n"))
                .transpose()?
                .flatten();
            match step {
                Some(n) if n > 0 => {
                    folded += n as u64;
                    bar.inc(n as u64);
                }
                // Caught up; or a replica's projector holds it for a step.
                Some(_) => break,
                None => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
        bar.finish_and_clear();
        eprintln!("rebuilt {name}: {folded} events folded");
    }
    Ok(())
}
