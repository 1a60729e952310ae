//! One DataLoader per request, batching every relation of SPEC §4 (unit →
//! attempts, current attempt, questions and open question, events; attempt,
//! event and question → unit) into one statement per relation per level of
//! the query, whatever the number of parents.

use std::collections::HashMap;

use async_graphql::dataloader::{DataLoader, Loader};
use uuid::Uuid;

use crate::auth::Principal;
use crate::db::entities::{attempt, event, question, work_unit};
use crate::db::reads::group_by;
use crate::ledger::Ledger;
use crate::ledger::cursor::Cursor;

/// Loads for one request's principal (and so one fleet).
pub struct LedgerLoader {
    ledger: Ledger,
    who: Principal,
}

pub type Loaders = DataLoader<LedgerLoader>;

pub fn for_request(ledger: Ledger, who: Principal) -> Loaders {
    DataLoader::new(LedgerLoader { ledger, who }, tokio::spawn)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnitId(pub Uuid);
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttemptId(pub Uuid);
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttemptsOf(pub Uuid);
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuestionsOf(pub Uuid);
/// A page of one unit's events: `first` rows after `after`, newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventsOf {
    pub unit: Uuid,
    pub first: i32,
    pub after: Option<Cursor>,
}

type Error = async_graphql::Error;

impl Loader<UnitId> for LedgerLoader {
    type Value = work_unit::Model;
    type Error = Error;

    async fn load(&self, keys: &[UnitId]) -> Result<HashMap<UnitId, Self::Value>, Error> {
        let rows = self.ledger.units_by_ids(&self.who, keys.iter().map(|k| k.0).collect()).await?;
        Ok(rows.into_iter().map(|u| (UnitId(u.id), u)).collect())
    }
}

impl Loader<AttemptId> for LedgerLoader {
    type Value = attempt::Model;
    type Error = Error;

    async fn load(&self, keys: &[AttemptId]) -> Result<HashMap<AttemptId, Self::Value>, Error> {
        let rows = self.ledger.attempts_by_ids(&self.who, keys.iter().map(|k| k.0).collect()).await?;
        Ok(rows.into_iter().map(|a| (AttemptId(a.id), a)).collect())
    }
}

impl Loader<AttemptsOf> for LedgerLoader {
    type Value = Vec<attempt::Model>;
    type Error = Error;

    async fn load(&self, keys: &[AttemptsOf]) -> Result<HashMap<AttemptsOf, Self::Value>, Error> {
        let rows = self.ledger.attempts_of_units(&self.who, keys.iter().map(|k| k.0).collect()).await?;
        let mut grouped = group_by(rows, |a| a.unit_id);
        Ok(keys.iter().map(|k| (*k, grouped.remove(&k.0).unwrap_or_default())).collect())
    }
}

impl Loader<QuestionsOf> for LedgerLoader {
    type Value = Vec<question::Model>;
    type Error = Error;

    async fn load(&self, keys: &[QuestionsOf]) -> Result<HashMap<QuestionsOf, Self::Value>, Error> {
        let rows = self.ledger.questions_of_units(&self.who, keys.iter().map(|k| k.0).collect()).await?;
        let mut grouped = group_by(rows, |q| q.unit_id);
        Ok(keys.iter().map(|k| (*k, grouped.remove(&k.0).unwrap_or_default())).collect())
    }
}

impl Loader<EventsOf> for LedgerLoader {
    /// `first + 1` rows at most: the extra one tells whether a next page exists.
    type Value = Vec<event::Model>;
    type Error = Error;

    async fn load(&self, keys: &[EventsOf]) -> Result<HashMap<EventsOf, Self::Value>, Error> {
        // Siblings almost always ask for the same page shape: one statement per shape.
        let shapes = group_by(keys.to_vec(), |k| (k.first, k.after));
        let mut out = HashMap::with_capacity(keys.len());
        for ((first, after), keys) in shapes {
            let units: Vec<Uuid> = keys.iter().map(|k| k.unit).collect();
            let rows = self.ledger.events_of_units(&self.who, units, first, after).await?;
            let mut grouped = group_by(rows, |e| e.unit_id);
            for k in keys {
                out.insert(k, grouped.remove(&k.unit).unwrap_or_default());
            }
        }
        Ok(out)
    }
}
