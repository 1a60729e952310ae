//! Relay connections over the ledger's keyset pages.

use async_graphql::OutputType;
use async_graphql::connection::{Connection, Edge};

use crate::ledger::cursor::{Cursor, CursorText, List};
use crate::ledger::reads::Page;
use crate::ledger::validate;

/// The complexity of a paged field (SPEC §9): what one item of the page
/// costs, times the number of items asked for. `first` is clamped to what
/// the page would accept (an invalid `first` is refused when the field runs,
/// before any row is read).
pub fn page_cost(first: Option<i32>, child_complexity: usize) -> usize {
    let items = first.unwrap_or(validate::DEFAULT_PAGE).clamp(1, validate::MAX_PAGE);
    usize::try_from(items).unwrap_or(1).saturating_mul(child_complexity.max(1))
}

/// Forward-only paging: `hasPreviousPage` is always false.
pub fn connection<T, N: OutputType>(
    page: Page<T>,
    list: List,
    key: impl Fn(&T) -> Cursor,
    node: impl Fn(T) -> N,
) -> Connection<String, N> {
    let mut connection = Connection::new(false, page.has_next);
    connection.edges.extend(page.items.into_iter().map(|item| Edge::new(key(&item).encode(list), node(item))));
    connection
}
