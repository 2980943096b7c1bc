#![doc = include_str!("../docs/architecture.md")]

pub mod access;
pub mod admission;
pub mod agents;
pub mod app;
pub mod blobs;
pub mod clock;
pub mod config;
pub mod doctor;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod hosts;
pub mod http;
pub mod keys;
pub mod limits;
pub mod markdown;
pub mod message;
pub mod metrics;
pub mod moderation;
pub mod net;
pub mod ops;
pub mod pipeline;
pub mod policy;
pub mod queue;
pub mod site;
pub mod store;
pub mod telemetry;
pub mod transports;
pub mod trust;

pub use app::Application;
pub use config::Config;
pub use error::{Error, Result};

/// The process allocator: mimalloc. Every request allocates and frees from several threads
/// (HTTP workers, the runtime, the database's worker threads); glibc's allocator spent about a
/// seventh of a request's CPU time in `malloc`, `free` and their arena consolidation. Built
/// without transparent huge pages for its heap (`no_thp`): where the kernel grants them on
/// request, each first touch of a 2 MiB page zeroed all of it, a tenth of the pipeline's CPU
/// while its caches filled.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
