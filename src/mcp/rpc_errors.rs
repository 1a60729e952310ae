//! `/mcp`'s refusals in JSON-RPC. rmcp answers a body it cannot decode (an
//! unpaired surrogate, a batch, anything that is not one JSON-RPC message)
//! and its refusals of the media types in plain text; the streamable HTTP
//! transport answers input the server cannot accept with an HTTP error
//! whose body is a JSON-RPC error without a request id (JSON-RPC's `id`
//! null: none can be read from such input).

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::model::{ClientJsonRpcMessage, ErrorCode};
use serde_json::{Value, json};

/// The refusal of a POST body that rmcp cannot take as one message: -32700
/// when it is not JSON text (invalid UTF-8 or JSON, an escape of an unpaired
/// surrogate), -32600 for a batch (JSON-RPC batching left MCP in
/// 2025-06-18) or any other JSON that is not a JSON-RPC message. `None`
/// when it is one.
pub(crate) fn refuse_body(body: &[u8]) -> Option<Response> {
    if serde_json::from_slice::<ClientJsonRpcMessage>(body).is_ok() {
        return None;
    }
    let (code, message) = match serde_json::from_slice::<Value>(body) {
        Err(_) => (
            ErrorCode::PARSE_ERROR,
            "parse error: the body is not JSON text (UTF-8, no escape of an unpaired surrogate such as \\ud800)",
        ),
        Ok(Value::Array(_)) => (
            ErrorCode::INVALID_REQUEST,
            "batches are not supported (MCP 2025-06-18 removed JSON-RPC batching): send one message per POST",
        ),
        Ok(_) => (
            ErrorCode::INVALID_REQUEST,
            "not a JSON-RPC 2.0 message this server takes: send one request {\"jsonrpc\": \"2.0\", \"id\", \
             \"method\", \"params\"}, notification or response",
        ),
    };
    Some(refusal(StatusCode::BAD_REQUEST, code, message))
}

/// rmcp's own answer, a plain-text refusal (406, 415, 405, ...) rewritten as
/// a JSON-RPC error with the same status and headers: its text as the
/// message, or for a server error a fixed one (the text is logged).
pub(crate) async fn in_json_rpc(response: Response) -> Response {
    let status = response.status();
    let json =
        response.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // rmcp's refusals are a line of text; a longer body is not one of them.
    let text = axum::body::to_bytes(body, 4096).await.map(|b| String::from_utf8_lossy(&b).trim().to_owned());
    let text = text.ok().filter(|t| !t.is_empty()).unwrap_or_else(|| status.to_string());
    let (code, message) = if status.is_server_error() {
        tracing::error!(status = status.as_u16(), text, "the MCP transport failed");
        (ErrorCode::INTERNAL_ERROR, "internal error of the MCP transport; try again".to_owned())
    } else {
        (ErrorCode::INVALID_REQUEST, text)
    };
    let answer = refusal(status, code, &message);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Response::from_parts(parts, answer.into_body())
}

/// `{"jsonrpc": "2.0", "id": null, "error": {...}}`, in JSON-RPC's order.
fn refusal(status: StatusCode, code: ErrorCode, message: &str) -> Response {
    let error = json!({ "code": code.0, "message": message });
    let body = format!(r#"{{"jsonrpc":"2.0","id":null,"error":{error}}}"#);
    (status, [(header::CONTENT_TYPE, "application/json")], Body::from(body)).into_response()
}
