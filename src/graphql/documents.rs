//! Parsed documents, kept by their text. Clients send the same few
//! documents over and over (an agent's claim, start and dispose, a
//! dashboard's panels) with other variables, and async-graphql's parser
//! (pest) costs more than the rest of a small request's execution: at the
//! HTTP floor it was 9% of the process's time. A document is parsed once
//! and cloned from here after; a clone shares every name.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_graphql::parser::types::ExecutableDocument;
use async_graphql::parser::{Result, parse_query};

/// Documents kept before the store starts over.
const CAPACITY: usize = 1024;
/// Longer documents are parsed every time (a client generating documents,
/// or a literal list of a thousand units, would only churn the store).
const MAX_LEN: usize = 16 * 1024;

#[derive(Default)]
pub struct Documents {
    parsed: Mutex<HashMap<Arc<str>, Arc<ExecutableDocument>>>,
}

impl Documents {
    /// `query` parsed: from the store, or parsed and kept. A document that
    /// does not parse is never kept.
    pub fn parse(&self, query: &str) -> Result<ExecutableDocument> {
        if let Some(known) = self.parsed.lock().unwrap_or_else(|e| e.into_inner()).get(query) {
            return Ok(ExecutableDocument::clone(known));
        }
        let document = parse_query(query)?;
        if query.len() <= MAX_LEN {
            let mut parsed = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
            if parsed.len() >= CAPACITY {
                parsed.clear();
            }
            parsed.insert(query.into(), Arc::new(document.clone()));
        }
        Ok(document)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_document_is_the_one_parsed_and_a_broken_one_is_never_kept() {
        let documents = Documents::default();
        let query = "query A($u: UUID!) { unit(id: $u) { id state } }";
        let first = documents.parse(query).expect("parses");
        let again = documents.parse(query).expect("kept");
        assert_eq!(format!("{first:?}"), format!("{again:?}"));
        assert_eq!(documents.parsed.lock().expect("lock").len(), 1);
        assert!(documents.parse("{ unit(").is_err());
        assert_eq!(documents.parsed.lock().expect("lock").len(), 1);
    }
}
