use async_graphql::Enum;
use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

// Each state's description says what its holder does in it, to the holder:
// MCP's instructions teach the holder's loop from these sentences.
/// Where a unit is in its life (SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Enum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "Enum", enum_name = "work_state")]
#[serde(rename_all = "snake_case")]
pub enum WorkState {
    /// Waiting to be claimed: no one holds it.
    #[sea_orm(string_value = "ready")]
    Ready,
    /// Claimed under a lease, work not started: start work, or release the unit if it is not for you.
    #[sea_orm(string_value = "claimed")]
    Claimed,
    /// Being worked on under a lease: heartbeat before the lease runs out; verify with an evidence link when
    /// done; block with a question when stuck; dispose DROPPED, DEFERRED or DEAD with evidence when the unit
    /// should not be migrated.
    #[sea_orm(string_value = "in_progress")]
    InProgress,
    /// Waiting for the answer to its blocking question: wait for it (it returns the unit IN_PROGRESS with the
    /// answer in its `questions`), or release the unit to take other work.
    #[sea_orm(string_value = "blocked")]
    Blocked,
    /// Verified with evidence: the attempt ended and the lease is cleared, so you hold nothing: claim your next
    /// unit, and still dispose of this one with MIGRATED.
    #[sea_orm(string_value = "verified")]
    Verified,
    /// Disposed MIGRATED: final.
    #[sea_orm(string_value = "done")]
    Done,
    /// Disposed DROPPED, DEFERRED or DEAD: final.
    #[sea_orm(string_value = "abandoned")]
    Abandoned,
}

impl WorkState {
    pub fn as_sql(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Claimed => "claimed",
            Self::InProgress => "in_progress",
            Self::Blocked => "blocked",
            Self::Verified => "verified",
            Self::Done => "done",
            Self::Abandoned => "abandoned",
        }
    }

    /// The name agents see in GraphQL and in error messages.
    pub fn api_name(self) -> &'static str {
        match self {
            Self::Ready => "READY",
            Self::Claimed => "CLAIMED",
            Self::InProgress => "IN_PROGRESS",
            Self::Blocked => "BLOCKED",
            Self::Verified => "VERIFIED",
            Self::Done => "DONE",
            Self::Abandoned => "ABANDONED",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Done | Self::Abandoned)
    }

    /// CLAIMED, IN_PROGRESS and BLOCKED: the agent holds the unit.
    pub fn is_live_claim(self) -> bool {
        matches!(self, Self::Claimed | Self::InProgress | Self::Blocked)
    }
}

/// The permanent decision on a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Enum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "Enum", enum_name = "disposition")]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Disposition {
    #[sea_orm(string_value = "MIGRATED")]
    Migrated,
    #[sea_orm(string_value = "DROPPED")]
    Dropped,
    #[sea_orm(string_value = "DEFERRED")]
    Deferred,
    #[sea_orm(string_value = "DEAD")]
    Dead,
}

impl Disposition {
    pub fn as_sql(self) -> &'static str {
        match self {
            Self::Migrated => "MIGRATED",
            Self::Dropped => "DROPPED",
            Self::Deferred => "DEFERRED",
            Self::Dead => "DEAD",
        }
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Enum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "Enum", enum_name = "attempt_outcome")]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    #[sea_orm(string_value = "verified")]
    Verified,
    #[sea_orm(string_value = "blocked")]
    Blocked,
    #[sea_orm(string_value = "failed")]
    Failed,
    #[sea_orm(string_value = "abandoned")]
    Abandoned,
    #[sea_orm(string_value = "superseded")]
    Superseded,
}

impl AttemptOutcome {
    pub fn as_sql(self) -> &'static str {
        match self {
            Self::Verified => "verified",
            Self::Blocked => "blocked",
            Self::Failed => "failed",
            Self::Abandoned => "abandoned",
            Self::Superseded => "superseded",
        }
    }
}

/// What an event row records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Enum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "Enum", enum_name = "event_type")]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    #[sea_orm(string_value = "registered")]
    Registered,
    #[sea_orm(string_value = "claimed")]
    Claimed,
    #[sea_orm(string_value = "heartbeat")]
    Heartbeat,
    #[sea_orm(string_value = "transitioned")]
    Transitioned,
    #[sea_orm(string_value = "blocked")]
    Blocked,
    #[sea_orm(string_value = "unblocked")]
    Unblocked,
    #[sea_orm(string_value = "cost_recorded")]
    CostRecorded,
    #[sea_orm(string_value = "disposed")]
    Disposed,
    #[sea_orm(string_value = "released")]
    Released,
    #[sea_orm(string_value = "stale_reclaimed")]
    StaleReclaimed,
    #[sea_orm(string_value = "stalled")]
    Stalled,
}

/// Lifecycle of a blocking question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Enum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "Enum", enum_name = "question_status")]
#[serde(rename_all = "snake_case")]
pub enum QuestionStatus {
    #[sea_orm(string_value = "open")]
    Open,
    #[sea_orm(string_value = "answered")]
    Answered,
    #[sea_orm(string_value = "cancelled")]
    Cancelled,
}
