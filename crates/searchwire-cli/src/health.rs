//! `searchwire health`: one `searchwire::Client` over the given nodes,
//! `Client::check_all_within` (GET / and the cluster-health capability probe on every node at
//! once, waiting for the probe, bounded by `--deadline` or the health-check timeout plus 1 s),
//! then a table or one JSON object — once, or every `--watch` interval with the same
//! client, so node state carries from one check to the next.
//!
//! The JSON shape and the exit codes are a contract (see `searchwire health --help`).

use searchwire::{Client, HealthReport};
use serde::Serialize;

use crate::args::HealthArgs;
use crate::connect::Auth;
use crate::exit;
use crate::output;

/// Runs the subcommand; returns the exit code (never returns with `--watch`, which runs
/// until interrupted).
pub async fn run(args: HealthArgs, auth: Auth) -> u8 {
    let client = match crate::connect::start(args.metrics_addr, || build_client(&args, auth)) {
        Ok(c) => c,
        Err(code) => return code,
    };
    loop {
        let limit = args
            .deadline
            .unwrap_or_else(crate::args::default_health_deadline);
        let report = client.check_all_within(limit).await;
        let text = if args.json {
            output::to_json_line(&to_json(&report))
        } else {
            render_table(&report)
        };
        output::stdout(text.as_bytes());
        match args.watch {
            None => return exit_code(&report),
            Some(every) => tokio::time::sleep(every).await,
        }
    }
}

/// The client of this run. It does its own checks, so no background refresh and no
/// resurrection timers (each check visits every node anyway). Errors are configuration
/// errors (exit 2).
fn build_client(a: &HealthArgs, auth: Auth) -> Result<Client, String> {
    crate::connect::connect(&a.conn, auth)?
        .health_refresh(false)
        .resurrection_timers(false)
        .build()
        .map_err(|e| e.to_string())
}

/// 0 when at least one node answered; 3 when none did and at least one did not answer
/// in time (within the health-check timeout or `--deadline`); 4 when none did; 5 when every node that answered rejected the
/// credentials.
pub fn exit_code(report: &HealthReport) -> u8 {
    if report.reachable() == 0 && report.timed_out() > 0 {
        exit::DEADLINE
    } else if report.reachable() == 0 {
        exit::NO_NODE
    } else if report.all_reachable_rejected_credentials() {
        exit::AUTH
    } else {
        exit::SUCCESS
    }
}

#[derive(Debug, Serialize, PartialEq)]
struct HealthJson<'a> {
    cluster_name: Option<&'a str>,
    status: &'static str,
    nodes: Vec<NodeJson<'a>>,
}

#[derive(Debug, Serialize, PartialEq)]
struct NodeJson<'a> {
    url: &'a str,
    state: &'static str,
    capability: &'static str,
    version: Option<&'a str>,
    distribution: Option<&'a str>,
    last_error: Option<&'a str>,
}

fn to_json(report: &HealthReport) -> HealthJson<'_> {
    HealthJson {
        cluster_name: report.cluster_name(),
        status: report.status().as_str(),
        nodes: report
            .nodes
            .iter()
            .map(|n| NodeJson {
                url: &n.url,
                state: state(n),
                capability: n.capability.as_str(),
                version: n.version.as_deref(),
                distribution: n.distribution.as_deref(),
                last_error: n.error.as_deref(),
            })
            .collect(),
    }
}

/// Widest table cell, in characters: a node can report any version or error text, and the
/// table must stay a table (the JSON output carries the full text).
const MAX_CELL_CHARS: usize = 120;

/// A server-supplied value as a table cell: control characters escaped, at most
/// [`MAX_CELL_CHARS`] characters.
fn cell(text: &str) -> String {
    let mut safe = output::terminal_safe(text, MAX_CELL_CHARS).into_owned();
    // A cell is one line.
    if safe.contains('\n') {
        safe = safe.replace('\n', "\\n");
    }
    safe
}

fn state(n: &searchwire::NodeReport) -> &'static str {
    if n.timed_out {
        "no answer"
    } else if n.alive {
        "alive"
    } else {
        "dead"
    }
}

/// A plain-text table: a summary line, then one row per node.
pub fn render_table(report: &HealthReport) -> String {
    let header = [
        "NODE",
        "STATE",
        "CAPABILITY",
        "VERSION",
        "DISTRIBUTION",
        "LAST ERROR",
    ];
    let rows: Vec<[String; 6]> = report
        .nodes
        .iter()
        .map(|n| {
            [
                cell(&n.url),
                state(n).to_string(),
                n.capability.as_str().to_string(),
                cell(n.version.as_deref().unwrap_or("-")),
                cell(n.distribution.as_deref().unwrap_or("-")),
                cell(n.error.as_deref().unwrap_or("-")),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            s.push_str(cell);
            if i + 1 < cells.len() {
                // Padded by hand: `format!`'s width is limited to u16 and panics beyond it.
                let pad = widths[i].saturating_sub(cell.chars().count()) + 2;
                s.extend(std::iter::repeat_n(' ', pad));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = format!(
        "cluster: {}  status: {}  reachable: {}/{}\n",
        cell(report.cluster_name().unwrap_or("-")),
        report.status(),
        report.reachable(),
        report.nodes.len()
    );
    out.push_str(&line(&header.map(String::from)));
    for row in &rows {
        out.push_str(&line(row));
    }
    out
}
