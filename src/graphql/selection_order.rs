//! The GraphQL specification's serialized map ordering (§7.1.2): a
//! response's entries come in the order the query selected them.
//! async-graphql 7.2 resolves the fields of a selection set concurrently and
//! inserts each into its map as it completes (`FuturesUnordered`), so a
//! field that waits for the database lands after one that did not
//! (async-graphql#612). [`Order`] is the document's order, taken while the
//! request is checked; [`Order::apply`] puts every map of the response back
//! into it, once, after execution.

use std::collections::HashMap;

use async_graphql::parser::types::{ExecutableDocument, FragmentDefinition, Selection, SelectionSet};
use async_graphql::{Name, Positioned, Value};

/// The response keys of a selection set in the order they were selected,
/// each with the order of its own selection (merged over every place the
/// key is selected, fragments spread in place).
#[derive(Debug, Default)]
pub struct Order {
    keys: Vec<(Name, Order)>,
}

impl Order {
    /// The order of `operation`'s selection set in `document`.
    pub fn of(document: &ExecutableDocument, set: &SelectionSet) -> Self {
        let mut order = Self::default();
        order.add(set, &document.fragments, &mut Vec::new());
        order
    }

    fn add(
        &mut self,
        set: &SelectionSet,
        fragments: &HashMap<Name, Positioned<FragmentDefinition>>,
        spreading: &mut Vec<Name>,
    ) {
        for item in &set.items {
            match &item.node {
                Selection::Field(field) => {
                    let key = field.node.response_key().node.clone();
                    let at = match self.keys.iter().position(|(k, _)| *k == key) {
                        Some(at) => at,
                        None => {
                            self.keys.push((key, Self::default()));
                            self.keys.len() - 1
                        }
                    };
                    self.keys[at].1.add(&field.node.selection_set.node, fragments, spreading);
                }
                Selection::InlineFragment(inline) => self.add(&inline.node.selection_set.node, fragments, spreading),
                Selection::FragmentSpread(spread) => {
                    let name = &spread.node.fragment_name.node;
                    // A cycle is refused by validation; it must not loop here.
                    if spreading.contains(name) {
                        continue;
                    }
                    if let Some(fragment) = fragments.get(name) {
                        spreading.push(name.clone());
                        self.add(&fragment.node.selection_set.node, fragments, spreading);
                        spreading.pop();
                    }
                }
            }
        }
    }

    /// Puts every map in `value` (this order's selection's answer) in order.
    pub fn apply(&self, value: &mut Value) {
        if self.keys.is_empty() {
            return;
        }
        match value {
            Value::List(items) => items.iter_mut().for_each(|item| self.apply(item)),
            Value::Object(map) => {
                let mut at = self.keys.iter().filter_map(|(key, _)| map.get_index_of(key));
                let mut last = at.next();
                let in_order = at.all(|next| {
                    let ok = last.is_some_and(|last| next > last);
                    last = Some(next);
                    ok
                });
                if !in_order {
                    let mut sorted = async_graphql::indexmap::IndexMap::with_capacity(map.len());
                    for (key, _) in &self.keys {
                        if let Some(entry) = map.shift_remove(key) {
                            sorted.insert(key.clone(), entry);
                        }
                    }
                    sorted.extend(map.drain(..));
                    *map = sorted;
                }
                for (key, order) in &self.keys {
                    if let Some(entry) = map.get_mut(key) {
                        order.apply(entry);
                    }
                }
            }
            _ => {}
        }
    }
}
