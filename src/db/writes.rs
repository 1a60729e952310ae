//! The ledger's writes: each is one call of its SQL function
//! (`migration/src/sql/repeatable/writes.sql`), one autocommit statement
//! whatever the call carries (an idempotency key, an attempt fence, a
//! domain). The SQL lives there and only there; this module calls a
//! function by the name its ledger method declares and decodes its answer
//! rows.

use sea_orm::{ConnectionTrait, DbErr, FromQueryResult, Value};
use uuid::Uuid;

use super::entities::work_unit;
use super::stmt;
use super::units::UNIT_COLUMNS;

/// One answer row of a write: `result` is `ok`, `claimed`, `reclaimed`,
/// `renewed`, `held`, `replayed`, or the code of the refusal; `unit` the
/// unit as the call left it (None when there is none in the fleet);
/// `info` what the refusal needs beyond the unit (holder, attempt, ...).
#[derive(Debug, Clone)]
pub struct Written {
    pub result: String,
    pub unit: Option<work_unit::Model>,
    pub info: serde_json::Value,
}

impl Written {
    /// A text field of `info`.
    pub fn info_str(&self, key: &str) -> Option<&str> {
        self.info.get(key).and_then(serde_json::Value::as_str)
    }
}

/// Calls write `function` with `values` (its arguments in order) as one
/// statement on `db` and returns its answer rows.
pub async fn call(db: &impl ConnectionTrait, function: &str, values: Vec<Value>) -> Result<Vec<Written>, DbErr> {
    let params = (1..=values.len()).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ");
    let sql = format!(
        "SELECT w.result, w.info, (w.unit).id IS NOT NULL AS found, {UNIT_COLUMNS}
           FROM {function}({params}) w CROSS JOIN LATERAL (SELECT (w.unit).*) u"
    );
    let rows = db.query_all_raw(stmt(&sql, values)).await?;
    rows.iter()
        .map(|row| {
            let found: bool = row.try_get("", "found")?;
            Ok(Written {
                result: row.try_get("", "result")?,
                unit: if found { Some(work_unit::Model::from_query_result(row, "")?) } else { None },
                info: row.try_get("", "info")?,
            })
        })
        .collect()
}

/// The units of every fleet whose attempt's lease expired with no
/// `stalled` event yet, most overdue first, at most `limit`
/// (`ledger_stalls_due`).
pub async fn stalls_due(db: &impl ConnectionTrait, limit: u32) -> Result<Vec<Uuid>, DbErr> {
    let rows = db
        .query_all_raw(stmt(
            "SELECT unit_id FROM ledger_stalls_due($1)",
            [i32::try_from(limit).unwrap_or(i32::MAX).into()],
        ))
        .await?;
    rows.iter().map(|row| row.try_get("", "unit_id")).collect()
}

/// Appends one `stalled` event per unit of `units` whose attempt's lease
/// has expired and has none yet (`ledger_report_stalls`); returns how many
/// it appended (another replica may have taken some, a write may hold
/// some).
pub async fn report_stalls(db: &impl ConnectionTrait, units: &[Uuid]) -> Result<u64, DbErr> {
    let row = db
        .query_one_raw(stmt("SELECT ledger_report_stalls($1) AS reported", [units.to_vec().into()]))
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("ledger_report_stalls".into()))?;
    let reported: i64 = row.try_get("", "reported")?;
    Ok(reported.max(0) as u64)
}

/// Compacts the totals' delta rows into one row per group and keeps the
/// cycle times of the weeks that ended (`ledger_compact`, compaction.sql);
/// returns the rows compacted and kept.
pub async fn compact_totals(db: &impl ConnectionTrait) -> Result<u64, DbErr> {
    let row = db
        .query_one_raw(stmt("SELECT ledger_compact() AS folded", []))
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("ledger_compact".into()))?;
    let folded: i64 = row.try_get("", "folded")?;
    Ok(folded.max(0) as u64)
}
