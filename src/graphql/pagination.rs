//! Relay connections over the ledger's keyset pages.

use async_graphql::OutputType;
use async_graphql::connection::{Connection, Edge};

use crate::ledger::cursor::{Cursor, CursorText, List};
use crate::ledger::reads::Page;

/// Forward-only paging: `hasPreviousPage` is always false.
pub fn connection<T, N: OutputType>(
    page: Page<T>,
    list: List,
    key: impl Fn(&T) -> Cursor,
    node: impl Fn(T) -> N,
) -> Connection<String, N> {
    connection_with(page, |item| key(item).encode(list), node)
}

/// As [`connection`], with the cursor text of each item given whole.
pub fn connection_with<T, N: OutputType>(
    page: Page<T>,
    cursor: impl Fn(&T) -> String,
    node: impl Fn(T) -> N,
) -> Connection<String, N> {
    let mut connection = Connection::new(false, page.has_next);
    connection.edges.extend(page.items.into_iter().map(|item| Edge::new(cursor(&item), node(item))));
    connection
}
