//! Errors that teach (SPEC §5): documents that do not parse or do not fit the
//! schema get `extensions.code` (`GRAPHQL_PARSE_FAILED`,
//! `GRAPHQL_VALIDATION_FAILED`) and, for an unknown name, the names the
//! caller probably meant. async-graphql suggests only names within a small
//! edit distance (`claim` does not find `claimNext`); this adds names that
//! contain the guess or are close to it, and when nothing is close on
//! `Query` or `Mutation`, lists the entry points so that one failed guess
//! is enough.

use async_graphql::ServerError;
use async_graphql::registry::{MetaType, Registry};

/// How many names a suggestion offers at most.
const MAX_SUGGESTIONS: usize = 4;

/// `err` (a validation error) with a hint when it names something unknown
/// ([`super::executor`] calls it for each).
pub(super) fn teach(registry: &Registry, mut err: ServerError) -> ServerError {
    if let Some(hint) = hint(registry, &err.message) {
        err.message.push(' ');
        err.message.push_str(&hint);
    }
    err
}

/// A hint for a validation message that names something unknown and has no
/// suggestion of its own yet.
fn hint(registry: &Registry, message: &str) -> Option<String> {
    if message.contains("Did you mean") {
        return None;
    }
    // The names in async-graphql's messages are the quoted parts.
    let quoted: Vec<&str> = message.split('"').skip(1).step_by(2).collect();
    if message.starts_with("Unknown field ") {
        let (field, type_name) = (quoted.first()?, quoted.get(1)?);
        let names = field_names(registry.types.get(*type_name)?);
        return Some(match did_you_mean(field, &names) {
            Some(hint) => hint,
            None if is_root(registry, type_name) => {
                format!("{type_name} has: {}. `GET /` (without a browser) serves a quick start.", names.join(", "))
            }
            None => format!("{type_name} has: {}.", names.join(", ")),
        });
    }
    if message.starts_with("Unknown argument ") && message.contains(" on field ") {
        let (argument, field, type_name) = (quoted.first()?, quoted.get(1)?, quoted.get(2)?);
        let meta = registry.types.get(*type_name)?.fields()?.get(*field)?;
        let names: Vec<&str> = meta.args.keys().map(String::as_str).collect();
        return did_you_mean(argument, &names).or_else(|| Some(format!("`{field}` takes: {}.", names.join(", "))));
    }
    if message.starts_with("Unknown type ") {
        let type_name = quoted.first()?;
        let names: Vec<&str> =
            registry.types.keys().map(String::as_str).filter(|name| !name.starts_with("__")).collect();
        return did_you_mean(type_name, &names);
    }
    if let Some((_, rest)) = message.split_once("enumeration type \"") {
        // `... enumeration type "E" does not contain the value "V"`
        let quoted: Vec<&str> = rest.split('"').step_by(2).collect();
        let (enum_name, value) = (quoted.first()?, quoted.get(1)?);
        let MetaType::Enum { enum_values, .. } = registry.types.get(*enum_name)? else { return None };
        let names: Vec<&str> = enum_values.keys().map(String::as_str).collect();
        return did_you_mean(value, &names).or_else(|| Some(format!("{enum_name} is one of: {}.", names.join(", "))));
    }
    None
}

fn is_root(registry: &Registry, type_name: &str) -> bool {
    registry.query_type == type_name || registry.mutation_type.as_deref() == Some(type_name)
}

fn field_names(meta: &MetaType) -> Vec<&str> {
    meta.fields()
        .map(|fields| fields.keys().map(String::as_str).filter(|name| !name.starts_with("__")).collect())
        .unwrap_or_default()
}

/// `Did you mean "a", "b"?` for the names that contain the guess (or that
/// it contains), share its first four letters, or are within a third of its
/// length in edit distance; closest first.
fn did_you_mean(guess: &str, names: &[&str]) -> Option<String> {
    let guess_lower = guess.to_lowercase();
    let mut scored: Vec<(usize, &str)> = names
        .iter()
        .filter_map(|name| {
            let lower = name.to_lowercase();
            if guess_lower.len() >= 3 && (lower.contains(&guess_lower) || guess_lower.contains(&lower)) {
                return Some((0, *name));
            }
            let shared_prefix = guess_lower.chars().zip(lower.chars()).take_while(|(a, b)| a == b).count();
            if shared_prefix >= 4 {
                return Some((1, *name));
            }
            let distance = levenshtein(&guess_lower, &lower);
            (distance <= (guess_lower.len() / 3).max(2)).then_some((distance + 1, *name))
        })
        .collect();
    if scored.is_empty() {
        return None;
    }
    scored.sort();
    let names: Vec<String> = scored.iter().take(MAX_SUGGESTIONS).map(|(_, name)| format!("\"{name}\"")).collect();
    Some(format!("Did you mean {}?", names.join(", ")))
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_names_that_contain_the_guess_or_are_close() {
        let names = ["claimNext", "claimUnit", "heartbeat", "transition", "dispose"];
        assert_eq!(did_you_mean("claim", &names).as_deref(), Some(r#"Did you mean "claimNext", "claimUnit"?"#));
        assert_eq!(did_you_mean("disposee", &names).as_deref(), Some(r#"Did you mean "dispose"?"#));
        assert_eq!(did_you_mean("hartbeat", &names).as_deref(), Some(r#"Did you mean "heartbeat"?"#));
        assert_eq!(did_you_mean("zzz", &names), None);
        assert_eq!(
            did_you_mean("VERIFY", &["IN_PROGRESS", "VERIFIED"]).as_deref(),
            Some(r#"Did you mean "VERIFIED"?"#)
        );
        assert_eq!(levenshtein("kitten", "sitting"), 3);
    }

    #[test]
    fn reads_the_names_out_of_async_graphql_messages() {
        let rest = r#"WorkState" does not contain the value "DONEE""#;
        let quoted: Vec<&str> = rest.split('"').step_by(2).collect();
        assert_eq!(quoted[..2], ["WorkState", "DONEE"]);
    }
}
