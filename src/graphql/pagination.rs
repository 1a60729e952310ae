//! Relay connections over the ledger's keyset pages, each with a
//! `totalCount` that costs nothing unless a client selects it.

use async_graphql::connection::{Connection, Edge};
use async_graphql::{Context, Object, OutputType};
use uuid::Uuid;

use super::loaders::EventCountOf;
use super::{Result, ledger, loaders, principal};
use crate::db::entities::work_unit;
use crate::ledger::cursor::{Cursor, CursorText, List};
use crate::ledger::reads::{Page, Total};

/// A connection of the API: edges, page info and `totalCount`.
pub type Conn<N> = Connection<String, N, TotalCount>;
use crate::ledger::validate;

/// The complexity of a paged field (SPEC §9): what one item of the page
/// costs, times the number of items asked for. `first` is clamped to what
/// the page would accept (an invalid `first` is refused when the field runs,
/// before any row is read).
pub fn page_cost(first: Option<i32>, child_complexity: usize) -> usize {
    let items = first.unwrap_or(validate::DEFAULT_PAGE).clamp(1, validate::MAX_PAGE);
    usize::try_from(items).unwrap_or(1).saturating_mul(child_complexity.max(1))
}

/// A unit's position in a list of units.
pub fn unit_cursor(u: &work_unit::Model) -> Cursor {
    Cursor { created_at: u.created_at, id: u.id }
}

/// Forward-only paging: `hasPreviousPage` is always false.
pub fn connection<T, N: OutputType>(
    page: Page<T>,
    list: List,
    key: impl Fn(&T) -> Cursor,
    node: impl Fn(T) -> N,
) -> Conn<N> {
    counted(page.items, page.has_next, TotalCount::List(page.total), list, key, node)
}

/// A connection over rows, counted by `total`.
pub fn counted<T, N: OutputType>(
    items: Vec<T>,
    has_next: bool,
    total: TotalCount,
    list: List,
    key: impl Fn(&T) -> Cursor,
    node: impl Fn(T) -> N,
) -> Conn<N> {
    counted_with(items, has_next, total, |item| key(item).encode(list), node)
}

/// As [`counted`], with the cursor text of each item given whole.
pub fn counted_with<T, N: OutputType>(
    items: Vec<T>,
    has_next: bool,
    total: TotalCount,
    cursor: impl Fn(&T) -> String,
    node: impl Fn(T) -> N,
) -> Conn<N> {
    let mut connection = Connection::with_additional_fields(false, has_next, total);
    connection.edges.extend(items.into_iter().map(|item| Edge::new(cursor(&item), node(item))));
    connection
}

/// How a connection counts its whole list. The count runs when (and only
/// when) `totalCount` is resolved, i.e. when the client selected it.
pub enum TotalCount {
    /// A `count(*)` with the list's own filter.
    List(Total),
    /// The events of one unit (batched over sibling units by a DataLoader).
    EventsOf(Uuid),
}

#[Object]
impl TotalCount {
    /// Rows of the whole list with the same filter, every page together.
    /// Counted only when selected: leave it out of queries that page through
    /// a large list.
    async fn total_count(&self, ctx: &Context<'_>) -> Result<i64> {
        match self {
            Self::List(total) => Ok(ledger(ctx).total(principal(ctx)?, total.clone()).await?),
            Self::EventsOf(unit) => Ok(loaders(ctx)?.load_one(EventCountOf(*unit)).await?.unwrap_or(0)),
        }
    }
}

/// The order of a list by creation time (ties broken by id). A cursor is
/// valid only in the order that produced it.
#[derive(async_graphql::Enum, Clone, Copy, PartialEq, Eq, Debug)]
#[graphql(name = "SortOrder")]
pub enum SortOrder {
    /// Oldest first.
    Asc,
    /// Newest first.
    Desc,
}

impl SortOrder {
    pub fn newest_first(order: Option<Self>, default: Self) -> bool {
        order.unwrap_or(default) == Self::Desc
    }
}
