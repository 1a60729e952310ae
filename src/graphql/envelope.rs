//! One envelope on every surface (SPEC §5): a bound call's result or its
//! refusal, made from the GraphQL response the call produced. A refusal is
//! `code`, `message`, then exactly the GraphQL error's other extensions
//! (`argument`, `unitId`, `state`, `legalActions`, ...), with `legalActions`
//! in the surface's language.

use serde_json::{Map, Value};

use super::bindings::translate;
use crate::contract::{Operation, Surface};

/// One GraphQL error object (`message`, `extensions`) as a refusal.
pub fn refusal(error: &Value, surface: Surface) -> Map<String, Value> {
    let mut envelope = Map::new();
    let extensions = error.get("extensions").and_then(Value::as_object);
    let code = extensions.and_then(|ext| ext.get("code")).cloned().unwrap_or_else(|| Value::from("INTERNAL"));
    envelope.insert("code".into(), code);
    envelope.insert("message".into(), error.get("message").cloned().unwrap_or_else(|| Value::from("")));
    for (key, value) in extensions.into_iter().flatten() {
        if key == "code" {
            continue;
        }
        let value = match (key.as_str(), value) {
            ("legalActions", Value::Array(actions)) => Value::Array(
                actions
                    .iter()
                    .filter_map(Value::as_str)
                    .filter_map(|action| translate(action, surface))
                    .map(Value::from)
                    .collect(),
            ),
            _ => value.clone(),
        };
        envelope.insert(key.clone(), value);
    }
    envelope
}

/// The result of a bound call from its GraphQL response: the field's value
/// under the operation's result key, with the response's extensions merged
/// in (`extensions.claim` gives a claim's `outcome`, `extensions.unblock` an
/// answer's `alsoAnswered`); or the refusal of its first error.
pub fn result(op: &Operation, response: &Value, surface: Surface) -> Result<Map<String, Value>, Map<String, Value>> {
    if let Some(error) = response.get("errors").and_then(Value::as_array).and_then(|errors| errors.first()) {
        return Err(refusal(error, surface));
    }
    let mut result = Map::new();
    let value = response.get("data").and_then(|data| data.get("result")).cloned().unwrap_or(Value::Null);
    result.insert(op.result.to_owned(), value);
    if let Some(Value::Object(extensions)) = response.get("extensions") {
        for fields in extensions.values().filter_map(Value::as_object) {
            result.extend(fields.clone());
        }
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_refusal_keeps_every_extension_and_speaks_the_surface() {
        let error = json!({
            "message": "no",
            "extensions": { "code": "ILLEGAL_TRANSITION", "unitId": "u", "state": "CLAIMED",
                            "legalActions": ["transition(to: IN_PROGRESS)", "release"] }
        });
        let mcp = refusal(&error, Surface::Mcp);
        assert_eq!(mcp["code"], "ILLEGAL_TRANSITION");
        assert_eq!(mcp["unitId"], "u");
        assert_eq!(mcp["state"], "CLAIMED");
        assert_eq!(mcp["legalActions"], json!(["start_work", "release"]));
        assert_eq!(refusal(&error, Surface::Cli)["legalActions"], json!(["start", "release"]));
    }
}
