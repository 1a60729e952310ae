//! Response extensions set by a resolver: `claimNext` and `claimUnit` say
//! what the claim did in `extensions.claim` (`outcome`, and with no unit
//! whether the domain is drained or busy), without changing the field's
//! type. MCP and the agent CLI read the same entry and return it as their
//! result's `outcome`.

use std::sync::{Arc, Mutex};

use async_graphql::extensions::{Extension, ExtensionContext, ExtensionFactory, NextExecute, NextPrepareRequest};
use async_graphql::{Context, Request, Response, ServerResult};

/// The notes of one request.
#[derive(Default)]
pub struct Notes(Mutex<Vec<(&'static str, serde_json::Value)>>);

/// Adds `value` as `extensions.<key>` of the response to this request.
pub fn note(ctx: &Context<'_>, key: &'static str, value: serde_json::Value) {
    if let Some(notes) = ctx.data_opt::<Arc<Notes>>() {
        notes.0.lock().unwrap_or_else(|e| e.into_inner()).push((key, value));
    }
}

pub struct ResponseNotes;

impl ExtensionFactory for ResponseNotes {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(PerRequest(Arc::default()))
    }
}

struct PerRequest(Arc<Notes>);

#[async_graphql::async_trait::async_trait]
impl Extension for PerRequest {
    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        next.run(ctx, request.data(self.0.clone())).await
    }

    async fn execute(
        &self,
        ctx: &ExtensionContext<'_>,
        operation_name: Option<&str>,
        next: NextExecute<'_>,
    ) -> Response {
        let mut response = next.run(ctx, operation_name).await;
        let notes = std::mem::take(&mut *self.0.0.lock().unwrap_or_else(|e| e.into_inner()));
        for (key, value) in notes {
            if let Ok(value) = async_graphql::Value::from_json(value) {
                response.extensions.insert(key.to_owned(), value);
            }
        }
        response
    }
}
