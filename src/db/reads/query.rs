//! The statement builder of the read path: SQL text and its positional
//! values, keyset paging on `(created_at, id)` or a name (never OFFSET), time ranges,
//! and the `count(*)` of a list, run only for a `totalCount` the client
//! asked for.

use chrono::{DateTime, Utc};
use sea_orm::{DatabaseTransaction, DbErr, EntityTrait, FromQueryResult, Statement, Value};
use uuid::Uuid;

use crate::db::entities::work_unit;
use crate::db::stmt;

/// A keyset position: the `(created_at, id)` of the last row of a page. Its
/// opaque text form for clients is `ledger::cursor`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cursor {
    pub created_at: DateTime<Utc>,
    pub id: Uuid,
}

/// A statement under construction: SQL text plus its positional values.
#[derive(Clone)]
pub struct Query {
    sql: String,
    values: Vec<Value>,
}

impl Query {
    pub fn new(sql: &str) -> Self {
        Self { sql: sql.to_owned(), values: Vec::new() }
    }

    /// Binds a value and returns its placeholder.
    pub fn bind(&mut self, value: impl Into<Value>) -> String {
        self.values.push(value.into());
        format!("${}", self.values.len())
    }

    /// Appends ` AND <condition>` where `{}` in `condition` is the bound value.
    pub fn and(&mut self, condition: &str, value: impl Into<Value>) -> &mut Self {
        let p = self.bind(value);
        self.sql.push_str(" AND ");
        self.sql.push_str(&condition.replace("{}", &p));
        self
    }

    pub fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    /// Keyset condition and order: rows after `cursor` on `(alias.created_at, alias.id)`.
    pub fn page(&mut self, alias: &str, cursor: Option<Cursor>, newest_first: bool, limit: i32) -> &mut Self {
        self.page_on(alias, "id", cursor, newest_first, limit)
    }

    /// Like [`Query::page`], for a relation whose id column has another name.
    pub fn page_on(
        &mut self,
        alias: &str,
        id: &str,
        cursor: Option<Cursor>,
        newest_first: bool,
        limit: i32,
    ) -> &mut Self {
        let (cmp, dir) = if newest_first { ("<", "DESC") } else { (">", "ASC") };
        if let Some(c) = cursor {
            let t = self.bind(c.created_at);
            let i = self.bind(c.id);
            self.sql.push_str(&format!(" AND ({alias}.created_at, {alias}.{id}) {cmp} ({t}, {i})"));
        }
        let l = self.bind(i64::from(limit));
        self.sql.push_str(&format!(" ORDER BY {alias}.created_at {dir}, {alias}.{id} {dir} LIMIT {l}"));
        self
    }

    /// Keyset condition and order on one unique text column (a name):
    /// rows after `after`, in that column's order.
    pub fn page_by_text(&mut self, column: &str, after: Option<String>, limit: i32) -> &mut Self {
        if let Some(after) = after {
            let p = self.bind(after);
            self.sql.push_str(&format!(" AND {column} > {p}"));
        }
        let l = self.bind(i64::from(limit));
        self.sql.push_str(&format!(" ORDER BY {column} LIMIT {l}"));
        self
    }

    /// Rows in `[from, until)` of a timestamp column; open where a bound is None.
    pub fn range(&mut self, column: &str, range: &Range) -> &mut Self {
        if let Some(from) = range.from {
            self.and(&format!("{column} >= {{}}"), from);
        }
        if let Some(until) = range.until {
            self.and(&format!("{column} < {{}}"), until);
        }
        self
    }

    /// The number of rows the query (not yet paged) selects: the `totalCount`
    /// of its list, with the very same filter.
    pub fn count(&self) -> Query {
        self.around("SELECT count(*) AS n FROM (", ") AS listed")
    }

    /// This query as a subquery: `before`, its SQL, `after`, with its values.
    pub fn around(&self, before: &str, after: &str) -> Query {
        Query { sql: format!("{before}{}{after}", self.sql), values: self.values.clone() }
    }

    /// The SQL text and its values, e.g. to EXPLAIN the very statement a read sends.
    pub fn parts(&self) -> (&str, &[Value]) {
        (&self.sql, &self.values)
    }

    /// The statement to send.
    pub(super) fn statement(self) -> Statement {
        stmt(&self.sql, self.values)
    }

    pub async fn scalar(self, tx: &DatabaseTransaction) -> Result<i64, DbErr> {
        #[derive(FromQueryResult)]
        struct N {
            n: i64,
        }
        Ok(N::find_by_statement(self.statement()).one(tx).await?.map_or(0, |r| r.n))
    }

    pub async fn units(self, tx: &DatabaseTransaction) -> Result<Vec<work_unit::Model>, DbErr> {
        work_unit::Entity::find().from_raw_sql(self.statement()).all(tx).await
    }

    pub async fn rows<T: FromQueryResult>(self, tx: &DatabaseTransaction) -> Result<Vec<T>, DbErr> {
        T::find_by_statement(self.statement()).all(tx).await
    }
}

/// A time range `[from, until)`; a missing bound is open.
#[derive(Debug, Clone, Copy, Default)]
pub struct Range {
    pub from: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}
