//! The one integration-test binary: the real server on port 0 against a temporary SQLite file,
//! and against PostgreSQL when `SWITCHBOARD_TEST_POSTGRES_URL` is set.

// A failed unwrap in a test is a test failure with a backtrace, which is what we want here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod a2a;
mod a2a_cards;
mod a2a_oauth;
mod a2a_privacy;
mod a2a_rest;
mod a2a_turns;
mod activitypub;
mod api;
mod architecture;
mod assembly;
mod audit;
mod caches;
mod cli;
mod connections;
mod console;
mod console_csrf;
mod conversation;
mod crash;
mod deploy;
mod doctor;
mod email;
mod examples;
mod extend;
mod helpers;
mod keys;
mod limits;
mod llm_interop;
mod logs;
mod media;
mod metrics;
mod multi_agent;
mod openai;
mod pipeline;
mod policy;
mod proxy;
mod quickstart;
mod read_api;
mod retention;
mod safety;
mod scale_out;
mod serving;
mod telemetry;
mod trust;
mod webhook;
