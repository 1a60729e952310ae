//! Integration tests: real PostgreSQL, the real server, over HTTP.

mod helpers;
mod ws_client;

mod agent_cli;
mod agents;
mod auth;
mod claims;
mod embedded;
mod fencing;
mod graphiql;
mod hostile;
mod idempotency;
mod invariants;
mod isolation;
mod lease;
mod lifecycle;
mod limits;
mod live;
mod live_exact;
mod live_ws;
mod lock_order;
mod mcp;
mod metrics;
mod node_client;
mod operator;
mod operator_calendar;
mod operator_reads;
mod reads;
mod register;
mod restart;
mod schema;
mod slow_clients;
mod soak;
mod views;
mod write_limits;
