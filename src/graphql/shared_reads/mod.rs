//! Identical reads sent together run once (issue 27).
//!
//! Dashboards refresh together: sixteen operators' panels send the same
//! document with the same variables within milliseconds, and on two cores
//! sixteen executions of a 2,920-row `throughput` queue for each other
//! (docs/BENCHMARKS.md). A query whose [`Key`] matches one already
//! running waits for that one to finish; every request that arrived
//! meanwhile is then answered by one execution, which starts after the last
//! of them arrived. Its snapshot is taken after each of their arrivals, so
//! every request still sees every write committed before it was sent, as if
//! it had run alone a moment later; none is answered from a snapshot older
//! than itself. A read with no twin in flight starts at once ([`gate`]).
//!
//! What an answer may depend on is in its key:
//! - the caller's fleet (row-level security and every read's scope) and
//!   permissions (`FORBIDDEN`, `legalActions`);
//! - the caller's name when the document selects a field whose answer
//!   depends on it, for this caller ([`CALLER_FIELDS`]);
//! - the document's text, the operation's name and the variables.
//!
//! Only a query is shared, over HTTP, and never one that waits for an
//! answer ([`OWN_FIELDS`]). The execution runs as one of the callers it
//! answers, one whose token has its turn for a fleet-wide read free (SPEC
//! §9) when there is one: a token busy with reads of its own does not hold
//! the others back. An answer with an error is not given to the requests
//! that joined it (the error can be the running caller's own): they go once
//! more through the gate together, and take what that gives. The execution
//! is driven by the requests waiting for it and stops when the last of them
//! is gone, as a request's own would when its client leaves; the next one
//! waits for its end without keeping it alive. A panic in it answers each
//! of them with an internal error. Every request is still authenticated,
//! checked, counted and traced as itself.

mod gate;

use std::collections::HashSet;

use async_graphql::Request;
use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};

pub use gate::{Gate, Turn};

use crate::auth::{Permission, Principal};

/// Fields whose answer depends on the caller's name (the agent id), not
/// only on its fleet and permissions, with the permission without which it
/// does not: the caller itself (`me`, with the unit it holds), and what the
/// caller may do to a unit, which differs for its holder, and only a caller
/// that may claim is taken for one (`ledger::state_machine::next_actions`).
/// A document that selects one of them anywhere, from a caller with that
/// permission, is shared only among requests of the same name.
pub const CALLER_FIELDS: &[(&str, Option<Permission>)] =
    &[("me", None), ("legalActions", Some(Permission::UnitsClaim))];
/// Fields never shared: a wait for the answer to a question lasts up to a
/// minute, and a twin waiting out another's first would wait twice.
pub const OWN_FIELDS: &[&str] = &["waitForAnswer"];

/// What decides a query's answer (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    fleet: String,
    permissions: Vec<&'static str>,
    /// The caller's name, for a document that selects one of [`CALLER_FIELDS`].
    caller: Option<String>,
    query: String,
    operation: Option<String>,
    variables: String,
}

impl Key {
    /// The key of `who`'s query `request`, whose document is `document`;
    /// `None` for a document that selects one of [`OWN_FIELDS`].
    pub fn of(who: &Principal, document: &ExecutableDocument, request: &Request) -> Option<Self> {
        let fields = selected_fields(document);
        if OWN_FIELDS.iter().any(|field| fields.contains(field)) {
            return None;
        }
        let by_name = CALLER_FIELDS
            .iter()
            .any(|(field, needs)| needs.is_none_or(|permission| who.has(permission)) && fields.contains(field));
        let mut permissions: Vec<&'static str> = who.permissions.iter().map(|p| p.as_str()).collect();
        permissions.sort_unstable();
        permissions.dedup();
        Some(Self {
            fleet: who.fleet.clone(),
            permissions,
            caller: by_name.then(|| who.name.clone()),
            query: request.query.clone(),
            operation: request.operation_name.clone(),
            variables: serde_json::to_string(&request.variables).ok()?,
        })
    }
}

/// The names of the fields `document` selects anywhere (in any of its
/// operations and fragments, spread or not).
fn selected_fields(document: &ExecutableDocument) -> HashSet<&str> {
    fn within<'d>(set: &'d SelectionSet, fields: &mut HashSet<&'d str>) {
        for item in &set.items {
            match &item.node {
                Selection::Field(field) => {
                    fields.insert(field.node.name.node.as_str());
                    within(&field.node.selection_set.node, fields);
                }
                Selection::InlineFragment(inline) => within(&inline.node.selection_set.node, fields),
                Selection::FragmentSpread(_) => {}
            }
        }
    }
    let mut fields = HashSet::new();
    for (_, operation) in document.operations.iter() {
        within(&operation.node.selection_set.node, &mut fields);
    }
    for fragment in document.fragments.values() {
        within(&fragment.node.selection_set.node, &mut fields);
    }
    fields
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_selects_a_field_through_fragments_and_other_operations() {
        let selects = |query: &str, field: &str| {
            selected_fields(&async_graphql::parser::parse_query(query).expect("a document")).contains(field)
        };
        assert!(!selects("{ throughput(bucket: DAY) { day verified } units { nodes { id } } }", "me"));
        assert!(selects("{ me { name } }", "me"));
        assert!(selects("{ units { nodes { legalActions } } }", "legalActions"));
        assert!(selects("{ units { nodes { ...F } } } fragment F on WorkUnit { legalActions }", "legalActions"));
        assert!(selects("{ units { nodes { ... on WorkUnit { legalActions } } } }", "legalActions"));
        assert!(selects("query A { units { totalCount } } query B { me { name } }", "me"));
        assert!(selects("{ waitForAnswer(unitId: \"u\") { id } }", "waitForAnswer"));
    }
}
