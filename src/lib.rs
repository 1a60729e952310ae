//! work-ledger: the durable system of record for fleets of AI coding agents.
//! A GraphQL service over PostgreSQL in which every unit of work has exactly
//! one claimant, one state, one permanent disposition and one cost.

pub mod agent_cli;
pub mod auth;
pub mod cli;
pub mod config;
pub mod contract;
pub mod db;
pub mod duration;
pub mod embedded_pg;
pub mod graphql;
pub mod http;
pub mod ledger;
pub mod live;
pub mod mcp;
pub mod metrics;
pub mod operator;
pub mod projector;
pub mod telemetry;
pub mod temporal;
