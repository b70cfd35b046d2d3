//! A web dashboard and a command-line tool for punctual's durable queues:
//! every queue of the Redis servers and PostgreSQL schemas it is given
//! (found without being declared), and queues of this process's memory.
//!
//! One operations layer (list, counts, entries by state a page at a time
//! either way, an entry with its failed attempts and kept result,
//! schedules, requeue (with a delay, in bulk), remove, cancel, clear the
//! dead letters, pause, resume, run a schedule now, pause or delete a
//! schedule, a queue's key limits with what runs of each key, set or
//! remove a limit; a queue's health: its workers, its runs under way, its
//! latency and its history per minute) behind three faces:
//!
//! - the command line, `punctual-admin` ([`cli::run`]), every read with
//!   `--json`;
//! - a JSON API under `/api/` answering the same documents;
//! - HTML pages drawn on the server (charts as SVG, buttons as forms that
//!   work without JavaScript), and Prometheus text at `/metrics`.
//!
//! The last two come as one [`axum::Router`] from [`Dashboard`], which an
//! application nests under its own authentication, or which
//! `punctual-admin serve` serves alone (loopback by default, a token or
//! read-only mode before anything else).
//!
//! Queues are opened as `serde_json::Value`s: the dashboard needs none of
//! the application's types. Every write made through any face is
//! recorded in an audit log kept in the store it writes to (a hidden
//! queue, `punctual-admin.audit`, 30 days). What it reads costs the store a page at a
//! time, never a scan of a queue; a queue's counts are read at most once
//! every 3 seconds however many people watch, and the list of queues once
//! every 30 seconds.
//!
//! # Examples
//!
//! ```no_run
//! use axum::Router;
//! use punctual_admin::Dashboard;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! let dashboard = Dashboard::builder()
//!     .redis("redis://127.0.0.1:6379/")
//!     .postgres("postgres://app@127.0.0.1/shop", "punctual")
//!     .router();
//! let app = Router::new().nest("/admin/jobs", dashboard);
//! axum::serve(tokio::net::TcpListener::bind("127.0.0.1:3000").await?, app).await
//! # }
//! ```

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

mod audit;
pub mod cli;
mod error;
mod fmt;
mod health;
mod history;
mod json;
mod ops;
mod store;
mod timeline;
mod web;

pub use web::{Dashboard, DashboardBuilder};

/// The PostgreSQL schema the command line reads when `--schema` is not
/// given, the library's default.
const DEFAULT_SCHEMA: &str = "punctual";
