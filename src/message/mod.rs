//! The NormalizedMessage contract: pure data, serde, validation and the history policy.
//!
//! Nothing here imports the rest of the application.

mod address;
pub mod chunk;
mod history;
mod macros;
pub mod reply_context;
pub mod schema;
mod time;
mod types;
mod validate;

pub use address::{Address, is_domain, is_handle_name};
pub use history::{HistoryPolicy, TrimmedHistory};
pub use reply_context::{ReplyContext, ReplyContextError, STORED_REPLY_CONTEXT};
pub use time::Timestamp;
pub use types::*;
pub use validate::ValidationError;

#[cfg(test)]
mod tests;
