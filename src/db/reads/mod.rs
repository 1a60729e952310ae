//! SQL of the read path: keyset pages (never OFFSET; a `count(*)` only for a
//! `totalCount` the client asked for), the batched loads behind the
//! DataLoaders, and the view queries.
//! Every statement runs inside `in_fleet`, so RLS applies on top of the
//! explicit `fleet = $1` that lets the planner use the fleet-leading indexes.
//!
//! | module | holds |
//! | --- | --- |
//! | [`query`] | the statement builder: keyset pages, ranges, counts |
//! | [`lists`] | the filtered lists: units, events, questions, units of a view |
//! | [`batches`] | the DataLoaders' batched loads |
//! | [`views`] | queue depth, disposition summary, cost per unit |
//! | [`roster`] | the fleet's agents (`v_agents`), paged by name |

mod batches;
mod lists;
mod query;
mod roster;
mod views;

pub use batches::{
    AttemptEndRow, DisposalRow, UnitCount, attempt_ends, attempts_by_ids, attempts_of_units, disposals_of_units,
    event_counts_of_units, events_of_units, group_by, questions_of_units, units_by_ids,
};
pub use lists::{
    EventFilter, QuestionFilter, UnitFilter, counted_by_totals, dispositions, events, events_counted_by_totals,
    events_page, questions, questions_page, units, units_counted_by_totals, units_in_view, view_page,
};
pub use query::{Cursor, Query, Range};
pub use roster::{AgentRow, AgentStatus, agents};
pub use views::{CostRow, DispositionRow, QueueDepthRow, cost_per_unit, disposition_summary, queue_depth};
