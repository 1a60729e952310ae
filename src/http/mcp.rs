//! `/mcp`'s HTTP layers in front of the MCP service ([`crate::mcp`]), the
//! same checks `/graphql` makes: the bearer token, then the body read whole.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tokio_util::sync::CancellationToken;

use super::{HttpConfig, auth_status, authenticate_token, is_json, read_body};
use crate::graphql::{LedgerSchema, error_body};
use crate::ledger::{Ledger, LedgerError};
use crate::mcp;

/// The `/mcp` routes over `ledger`, stopped by `stop`. Their layers run
/// only for `/mcp` (other paths get the server's 404, unauthenticated):
/// the bearer token, then the body read whole within `http`'s body-read
/// timeout and SPEC §9's size (rmcp reads bodies with no time limit) and
/// refused in JSON-RPC unless it is one message. The `Host` and `Origin`
/// checks are the server's ([`super::surface`]).
pub(super) fn routes(schema: LedgerSchema, ledger: Ledger, stop: CancellationToken, http: HttpConfig) -> Router {
    mcp::routes(schema, stop)
        .route_layer(middleware::from_fn_with_state(http, read_whole_body))
        .route_layer(middleware::from_fn_with_state(ledger, authenticate))
}

/// Bearer authentication in front of the MCP service: 401 without a valid
/// token (logged and counted like every surface's), otherwise the principal
/// rides in the request's extensions (rmcp hands the HTTP request parts to
/// the tools).
async fn authenticate(State(ledger): State<Ledger>, mut request: Request, next: Next) -> Response {
    let header = request.headers().get(header::AUTHORIZATION).map(|v| v.to_str().unwrap_or(""));
    let client = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    match authenticate_token(&ledger, header, client, "mcp").await {
        Ok((principal, _)) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(err) => refusal(auth_status(&err), err),
    }
}

/// The request with its body read whole: 408 when it does not arrive within
/// the body-read timeout, 413 past the size limit; a JSON POST that is not
/// one JSON-RPC message is refused in JSON-RPC, and so is what rmcp refuses.
async fn read_whole_body(State(http): State<HttpConfig>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = match read_body(body, http.body_read_timeout).await {
        Ok(bytes) => bytes,
        Err(err) => return refusal(err.status(), err.into_ledger_error()),
    };
    // rmcp checks the media types first; its refusals of them are rewritten below.
    if parts.method == Method::POST
        && is_json(&parts.headers)
        && let Some(refused) = mcp::rpc_errors::refuse_body(&bytes)
    {
        return refused;
    }
    let answer = next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await;
    mcp::rpc_errors::in_json_rpc(answer).await
}

/// An HTTP refusal before the MCP service: the body `/graphql` sends for
/// the same refusal (`{"errors": [<error object>]}`).
fn refusal(status: axum::http::StatusCode, err: LedgerError) -> Response {
    let body = error_body(err);
    let mut response = (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response();
    if status == axum::http::StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    }
    response
}
