//! SeaORM entities for the five tables of SPEC §2 and the PostgreSQL enum
//! types they use. The enums double as GraphQL enums (upper case there).

pub mod api_token;
pub mod attempt;
pub mod event;
pub mod question;
pub mod work_unit;

mod enums;
pub use enums::{AttemptOutcome, Disposition, EventType, QuestionStatus, WorkState};
