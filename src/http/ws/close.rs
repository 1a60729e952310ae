//! The close codes this server sends: RFC 6455's and graphql-transport-ws's.

pub const NORMAL: u16 = 1000;
pub const GOING_AWAY: u16 = 1001;
pub const POLICY_VIOLATION: u16 = 1008;
/// A message over the size limit.
pub const MESSAGE_TOO_BIG: u16 = 1009;
pub const INTERNAL_ERROR: u16 = 1011;
/// A malformed message.
pub const BAD_REQUEST: u16 = 4400;
/// `subscribe` before `connection_ack`.
pub const UNAUTHORIZED: u16 = 4401;
/// A missing, unknown, revoked or expired token.
pub const FORBIDDEN: u16 = 4403;
/// The client did not offer `graphql-transport-ws`.
pub const SUBPROTOCOL_NOT_ACCEPTABLE: u16 = 4406;
/// No `connection_init` in time.
pub const INIT_TIMEOUT: u16 = 4408;
/// A `subscribe` with an id already in use.
pub const DUPLICATE_ID: u16 = 4409;
/// A second `connection_init`.
pub const TOO_MANY_INIT: u16 = 4429;
/// More WebSockets for one token than the server allows (the same code:
/// "too many requests").
pub const TOO_MANY_CONNECTIONS: u16 = 4429;

/// A close code and its reason.
pub(super) type Closing = (u16, String);
