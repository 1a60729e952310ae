//! Integration tests: real PostgreSQL, the real server, over HTTP.

mod helpers;

mod auth;
mod embedded;
mod invariants;
mod isolation;
mod limits;
mod register;
mod schema;
