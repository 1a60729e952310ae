//! Integration tests: real PostgreSQL, the real server, over HTTP.

mod helpers;
mod ws_client;

mod agents;
mod auth;
mod claims;
mod embedded;
mod graphiql;
mod http_spec;
mod idempotency;
mod invariants;
mod isolation;
mod lease;
mod lifecycle;
mod limits;
mod live;
mod live_ws;
mod mcp;
mod metrics;
mod node_client;
mod operator;
mod reads;
mod register;
mod schema;
mod soak;
mod surface;
mod views;
mod write_limits;
