//! Response extensions set by a resolver: `claimNext` and `claimUnit` say
//! what the claim did in `extensions.claim` (`outcome`, and with no unit
//! whether the domain is drained or busy), without changing the field's
//! type. MCP and the agent CLI read the same entry and return it as their
//! result's `outcome`.

use std::sync::{Arc, Mutex};

use async_graphql::{Context, Response};

/// The notes of one request.
#[derive(Default)]
pub struct Notes(Mutex<Vec<(&'static str, serde_json::Value)>>);

/// Adds `value` as `extensions.<key>` of the response to this request.
pub fn note(ctx: &Context<'_>, key: &'static str, value: serde_json::Value) {
    if let Some(notes) = ctx.data_opt::<Arc<Notes>>() {
        notes.0.lock().unwrap_or_else(|e| e.into_inner()).push((key, value));
    }
}

/// Moves the notes of a request into its response's `extensions` (the
/// executor, [`super::executor`], once execution is done).
pub(super) fn into_response(notes: &Notes, response: &mut Response) {
    let taken = std::mem::take(&mut *notes.0.lock().unwrap_or_else(|e| e.into_inner()));
    for (key, value) in taken {
        if let Ok(value) = async_graphql::Value::from_json(value) {
            response.extensions.insert(key.to_owned(), value);
        }
    }
}
