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
pub mod hop;
pub mod hosts;
pub mod http;
pub mod jws;
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

/// The process allocator: mimalloc, made for memory allocated on one thread and freed on another
/// (HTTP workers, the runtime, the database's threads), as every request does. Built with
/// `no_thp`: its heap asks for no transparent huge pages, so a page's first touch zeroes 4 KiB,
/// not 2 MiB. (Why, measured: `docs/benchmarks/pipeline.md`.)
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
