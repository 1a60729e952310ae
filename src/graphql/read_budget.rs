//! What one request may ask of the database (SPEC §9, issue 23): at most
//! [`MAX_FLEET_READS`] fleet-wide reads and at most [`MAX_ALIASES`] aliases
//! of one field in one selection, checked on the document before anything
//! runs. The reads are priced by HTTP request: a batch's operations share
//! one budget ([`check_batch`]), each within it on its own too.
//!
//! The complexity budget prices rows: a paged field costs `first` times its
//! items. A fleet-wide read costs a scan however few rows it returns (one
//! `queueDepth` on a 200,000-unit fleet reads them all), and `totalCount`
//! sits inside a connection, where a complexity would be multiplied by the
//! page size. So these reads are counted, where they appear in the
//! document, rather than priced.

use std::collections::{HashMap, HashSet};

use async_graphql::parser::types::{ExecutableDocument, OperationDefinition, Selection, SelectionSet};
use async_graphql::{Pos, Positioned, ServerError, ServerResult};

use super::request_errors::VALIDATION_FAILED;

/// The reads that scan the caller's whole fleet, whatever they return.
pub const FLEET_READS: &[&str] = &[
    "queueDepth",
    "openQuestionGroups",
    "costSummary",
    "costTotal",
    "throughput",
    "weeklyMetrics",
    "claimingAgents",
    "dispositionSummary",
    "stalls",
    "agents",
    "totalCount",
];
/// Fleet-wide reads in one request: a dashboard's handful.
pub const MAX_FLEET_READS: usize = 5;
/// Response names (aliases) of one field in one selection.
pub const MAX_ALIASES: usize = 10;

/// Every operation of `document` within both limits; the fleet-wide reads
/// of the one that runs (`runs`, when the document names one), for the
/// request's budget.
pub(super) fn check(
    document: &ExecutableDocument,
    runs: Option<&Positioned<OperationDefinition>>,
) -> ServerResult<usize> {
    let mut walk = Walk { document, fragments: HashMap::new(), entered: HashSet::new() };
    let mut priced = 0;
    for (_, operation) in document.operations.iter() {
        let reads = walk.selection(&operation.node.selection_set.node)?;
        if reads > MAX_FLEET_READS {
            return Err(over_budget("this operation", reads, Some(operation.pos)));
        }
        if runs.is_some_and(|runs| std::ptr::eq(runs, operation)) {
            priced = reads;
        }
    }
    Ok(priced)
}

/// The operations of one HTTP request (a batch) within the budget together,
/// `reads` the fleet-wide reads of each; over it, the refusal every one of
/// them answers (none runs).
pub(super) fn check_batch(reads: &[usize]) -> ServerResult<()> {
    let total: usize = reads.iter().sum();
    if total > MAX_FLEET_READS {
        return Err(over_budget(&format!("this batch of {} operations", reads.len()), total, None));
    }
    Ok(())
}

/// The refusal of `what` (an operation, a batch) asking for `reads` fleet-wide reads.
fn over_budget(what: &str, reads: usize, pos: Option<Pos>) -> ServerError {
    refusal(
        format!(
            "{what} asks for {reads} fleet-wide reads ({}): at most {MAX_FLEET_READS} per request, each scans \
             the whole fleet; nothing ran: send the others in later requests",
            FLEET_READS.join(", ")
        ),
        pos,
    )
}

fn refusal(message: String, pos: Option<Pos>) -> ServerError {
    let mut err = ServerError::new(message, pos);
    err.extensions.get_or_insert_with(Default::default).set("code", VALIDATION_FAILED);
    err
}

struct Walk<'d> {
    document: &'d ExecutableDocument,
    /// Fleet-wide reads of each fragment, counted once however often it is spread.
    fragments: HashMap<&'d str, usize>,
    /// Fragments being counted (a cycle counts nothing here; validation refuses it).
    entered: HashSet<&'d str>,
}

impl<'d> Walk<'d> {
    /// The fleet-wide reads under `set`; refuses a field with too many aliases.
    fn selection(&mut self, set: &'d SelectionSet) -> ServerResult<usize> {
        let mut keys: HashMap<&str, (HashSet<&str>, Pos)> = HashMap::new();
        self.level(set, &mut keys, &mut HashSet::new())?;
        for (name, (aliases, pos)) in &keys {
            if aliases.len() > MAX_ALIASES {
                return Err(refusal(
                    format!(
                        "field `{name}` is asked under {} aliases in one selection: at most {MAX_ALIASES}",
                        aliases.len()
                    ),
                    Some(*pos),
                ));
            }
        }
        let mut reads = 0usize;
        for (name, (aliases, _)) in keys {
            if FLEET_READS.contains(&name) {
                reads = reads.saturating_add(aliases.len());
            }
        }
        for item in &set.items {
            let nested = match &item.node {
                Selection::Field(field) => self.selection(&field.node.selection_set.node)?,
                Selection::InlineFragment(inline) => self.nested(&inline.node.selection_set.node)?,
                Selection::FragmentSpread(spread) => self.fragment(spread.node.fragment_name.node.as_str())?,
            };
            reads = reads.saturating_add(nested);
        }
        Ok(reads)
    }

    /// The fields of one selection (fragments flattened into it), by name,
    /// with their response keys.
    fn level(
        &self,
        set: &'d SelectionSet,
        keys: &mut HashMap<&'d str, (HashSet<&'d str>, Pos)>,
        spread: &mut HashSet<&'d str>,
    ) -> ServerResult<()> {
        for item in &set.items {
            match &item.node {
                Selection::Field(field) => {
                    let entry = keys.entry(field.node.name.node.as_str()).or_insert_with(|| (HashSet::new(), item.pos));
                    entry.0.insert(field.node.response_key().node.as_str());
                }
                Selection::InlineFragment(inline) => self.level(&inline.node.selection_set.node, keys, spread)?,
                Selection::FragmentSpread(name) => {
                    let name = name.node.fragment_name.node.as_str();
                    if let Some(fragment) = self.document.fragments.get(name)
                        && spread.insert(name)
                    {
                        self.level(&fragment.node.selection_set.node, keys, spread)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Reads under the fields of an inline fragment or a fragment, whose own
    /// fields were counted with the selection they are spread into.
    fn nested(&mut self, set: &'d SelectionSet) -> ServerResult<usize> {
        let mut reads = 0usize;
        for item in &set.items {
            let nested = match &item.node {
                Selection::Field(field) => self.selection(&field.node.selection_set.node)?,
                Selection::InlineFragment(inline) => self.nested(&inline.node.selection_set.node)?,
                Selection::FragmentSpread(spread) => self.fragment(spread.node.fragment_name.node.as_str())?,
            };
            reads = reads.saturating_add(nested);
        }
        Ok(reads)
    }

    fn fragment(&mut self, name: &'d str) -> ServerResult<usize> {
        if let Some(&reads) = self.fragments.get(name) {
            return Ok(reads);
        }
        let Some(fragment) = self.document.fragments.get(name) else { return Ok(0) };
        if !self.entered.insert(name) {
            return Ok(0);
        }
        let reads = self.nested(&fragment.node.selection_set.node)?;
        self.entered.remove(name);
        self.fragments.insert(name, reads);
        Ok(reads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(query: &str) -> Result<usize, String> {
        let document = async_graphql::parser::parse_query(query).map_err(|e| e.to_string())?;
        check(&document, None).map_err(|e| e.message)
    }

    #[test]
    fn counts_fleet_reads_through_aliases_and_fragments() {
        assert!(checked("{ a: queueDepth { ready } b: queueDepth { ready } stalls { totalCount } }").is_ok());
        let six = "{ a: queueDepth { ready } b: queueDepth { ready } c: queueDepth { ready } d: queueDepth { ready } \
                   e: queueDepth { ready } f: dispositionSummary { count } }";
        assert!(checked(six).is_err());
        // A fragment spread four times counts four times, not once.
        let spread = "fragment F on Query { queueDepth { ready } stalls { totalCount } }
                      { ...F a: units { edges { node { id } } } }";
        assert!(checked(spread).is_ok());
        let nested = "fragment C on WorkUnitConnection { totalCount }
                      { a: units { ...C } b: units { ...C } c: units { ...C } d: units { ...C } e: units { ...C } \
                        f: units { ...C } }";
        assert!(checked(nested).is_err());
        // Cycles are left to validation.
        assert!(checked("fragment A on Query { ...B } fragment B on Query { ...A } { ...A }").is_ok());
    }

    #[test]
    fn prices_the_operation_that_runs_and_the_batch_together() {
        let document = async_graphql::parser::parse_query(
            "query A { queueDepth { ready } } query B { a: queueDepth { ready } b: stalls { totalCount } }",
        );
        let document = document.expect("parses");
        let runs = crate::graphql::request_errors::selected(&document, Some("B"));
        // B runs: its queueDepth, its stalls and the totalCount inside.
        assert_eq!(check(&document, runs).ok(), Some(3));
        assert_eq!(check(&document, None).ok(), Some(0));
        assert!(check_batch(&[2, 3, 0]).is_ok());
        assert!(check_batch(&[5, 1]).is_err());
    }

    #[test]
    fn limits_aliases_of_one_field() {
        let aliases = |n: usize| format!("{{ {} }}", (0..n).map(|i| format!("a{i}: serverTime ")).collect::<String>());
        assert!(checked(&aliases(MAX_ALIASES)).is_ok());
        assert!(checked(&aliases(MAX_ALIASES + 1)).is_err());
        // The same response key twice is one field (GraphQL merges it).
        assert!(checked("{ serverTime serverTime me { name } }").is_ok());
    }
}
