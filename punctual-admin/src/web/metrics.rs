//! `/metrics`: the depth of every queue by state, in Prometheus's text
//! format, from the same cached counts as the pages (so scrapes, like
//! viewers, cost the store at most one read per queue every few seconds).
//!
//! The names and labels are those the library's own gauge gets through
//! `metrics-exporter-prometheus` (`punctual.queue.entries`, feature
//! `metrics`), so one dashboard of graphs reads either; a queue of a store
//! that its kind does not tell apart (a second Redis server, a label) adds
//! `punctual_source`, so no two queues share a series.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::Shared;
use super::chart::count_of;
use super::views::STATES;
use crate::ops::Listed;

pub(crate) async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let (listed, failed) = shared.ops.queues().await;
    let mut out = String::new();
    out.push_str(
        "# HELP punctual_queue_entries Entries of a durable queue by state, as punctual-admin last read them.\n\
         # TYPE punctual_queue_entries gauge\n",
    );
    for l in &listed {
        let Ok(s) = &l.snapshot else { continue };
        for state in STATES {
            let _ = writeln!(
                out,
                "punctual_queue_entries{{{},punctual_entry_state=\"{state}\"}} {}",
                labels(l),
                count_of(&s.stats, state)
            );
        }
    }
    out.push_str(
        "# HELP punctual_queue_paused Whether a durable queue is paused (1) or running (0).\n\
         # TYPE punctual_queue_paused gauge\n",
    );
    for l in &listed {
        let Ok(s) = &l.snapshot else { continue };
        let _ = writeln!(
            out,
            "punctual_queue_paused{{{}}} {}",
            labels(l),
            u8::from(s.paused)
        );
    }
    out.push_str(
        "# HELP punctual_store_clock_offset_seconds A store's clock minus punctual-admin's.\n\
         # TYPE punctual_store_clock_offset_seconds gauge\n",
    );
    for l in &listed {
        let Ok(s) = &l.snapshot else { continue };
        let _ = writeln!(
            out,
            "punctual_store_clock_offset_seconds{{{}}} {}",
            labels(l),
            s.offset
        );
    }
    out.push_str(
        "# HELP punctual_admin_read_errors Queues and stores punctual-admin could not read on this scrape.\n\
         # TYPE punctual_admin_read_errors gauge\n",
    );
    let errors = failed.len() + listed.iter().filter(|l| l.snapshot.is_err()).count();
    let _ = writeln!(out, "punctual_admin_read_errors {errors}");
    out.push_str(
        "# HELP punctual_admin_stats_reads_total Reads of a queue's counts (with its clock and paused flag) punctual-admin made: at most one per queue every few seconds.\n\
         # TYPE punctual_admin_stats_reads_total counter\n",
    );
    let _ = writeln!(
        out,
        "punctual_admin_stats_reads_total {}",
        shared.ops.stats_reads()
    );
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

/// The labels naming a queue, as the library's metrics name it, and
/// `punctual_source` (the store's identity, as the JSON's `"source"`) where
/// two stores of one kind, or a label, need it: no two queues share a
/// series.
fn labels(l: &Listed) -> String {
    let mut out = format!(
        "messaging_system=\"punctual\",messaging_destination_name=\"{}\",punctual_store=\"{}\"",
        escape(&l.id.name),
        l.kind
    );
    if let Some(source) = &l.source {
        let _ = write!(out, ",punctual_source=\"{}\"", escape(source));
    }
    out
}

/// A label value escaped as the text format wants.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape("a\nb"), "a\\nb");
    }
}
