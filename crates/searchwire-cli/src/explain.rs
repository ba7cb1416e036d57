//! `searchwire explain`: print the resurrection schedule and the defaults table straight from
//! the library's own functions, so docs can be regenerated (and checked) from the code.

use std::fmt::Write as _;
use std::time::Duration;

use searchwire::explain::{compute, format_duration, ScheduleRow};
use searchwire::{Capacity, ResurrectionConfig};
use serde::Serialize;

use crate::args::{Format, ResurrectionArgs, DEFAULT_TOTAL};

/// The inputs of one `explain resurrection` run, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub config: ResurrectionConfig,
    pub cores: u32,
    pub capacity: Capacity,
    pub total: u64,
    pub live: Vec<u64>,
    pub failures: Vec<u32>,
}

impl Plan {
    /// Validates the arguments; the error is a sentence for the user (a usage error).
    pub fn from_args(a: &ResurrectionArgs) -> Result<Plan, String> {
        let d = ResurrectionConfig::default();
        let config = ResurrectionConfig {
            initial: a.initial.unwrap_or(d.initial),
            max: a.max.unwrap_or(d.max),
            factor_cutoff: a.cutoff.unwrap_or(d.factor_cutoff),
            minimum: a.minimum.unwrap_or(d.minimum),
            jitter_scale: d.jitter_scale,
        };
        config.validate()?;
        let total = a.total.unwrap_or(DEFAULT_TOTAL);
        let live = if a.live.is_empty() {
            (0..total).collect()
        } else {
            if let Some(bad) = a.live.iter().find(|l| **l >= total) {
                return Err(format!(
                    "--live {bad} is not below --total {total}: a resurrection is computed for a \
                     dead node, so at most total-1 nodes can be live"
                ));
            }
            a.live.clone()
        };
        let failures = if a.failures.is_empty() {
            vec![config.factor_cutoff.saturating_add(1)]
        } else {
            a.failures.clone()
        };
        let cores = a.cores.unwrap_or(Capacity::DEFAULT_CORES);
        Ok(Plan {
            config,
            cores,
            capacity: Capacity::from_cores(cores),
            total,
            live,
            failures,
        })
    }

    /// One row per (live, failures) pair, live-major.
    pub fn rows(&self) -> Vec<ScheduleRow> {
        let mut rows = Vec::with_capacity(self.live.len() * self.failures.len());
        for &live in &self.live {
            let live = usize::try_from(live).unwrap_or(usize::MAX);
            let total = usize::try_from(self.total).unwrap_or(usize::MAX);
            for &f in &self.failures {
                rows.push(compute(
                    &self.config,
                    &self.capacity,
                    live,
                    total.saturating_sub(live),
                    f,
                ));
            }
        }
        rows
    }
}

/// A duration in seconds, rounded to milliseconds (3 decimals).
fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

#[derive(Serialize)]
struct JsonRow {
    live: usize,
    dead: usize,
    failures: u32,
    base_s: f64,
    health_s: f64,
    rate_limit_s: f64,
    final_s: f64,
    jitter_max_s: f64,
}

impl From<&ScheduleRow> for JsonRow {
    fn from(r: &ScheduleRow) -> JsonRow {
        JsonRow {
            live: r.live,
            dead: r.dead,
            failures: r.failures,
            base_s: secs(r.base),
            health_s: secs(r.health),
            rate_limit_s: secs(r.rate_limit),
            final_s: secs(r.final_timeout),
            jitter_max_s: secs(r.jitter_max),
        }
    }
}

/// Renders the schedule in the requested format (always ends with a newline).
pub fn render_resurrection(plan: &Plan, format: Format) -> String {
    let rows = plan.rows();
    match format {
        Format::Json => {
            let json: Vec<JsonRow> = rows.iter().map(JsonRow::from).collect();
            let mut s = serde_json::to_string(&json).unwrap_or_else(|_| "[]".to_string());
            s.push('\n');
            s
        }
        Format::Csv => {
            let mut s = String::from(
                "live,dead,failures,base_s,health_s,rate_limit_s,final_s,jitter_max_s\n",
            );
            for r in rows.iter().map(JsonRow::from) {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{},{}",
                    r.live,
                    r.dead,
                    r.failures,
                    r.base_s,
                    r.health_s,
                    r.rate_limit_s,
                    r.final_s,
                    r.jitter_max_s
                );
            }
            s
        }
        Format::Table => {
            let header = [
                "live",
                "dead",
                "failures",
                "base",
                "health",
                "rate_limit",
                "final",
                "jitter_max",
            ];
            let body: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    vec![
                        r.live.to_string(),
                        r.dead.to_string(),
                        r.failures.to_string(),
                        format_duration(r.base),
                        format_duration(r.health),
                        format_duration(r.rate_limit),
                        format_duration(r.final_timeout),
                        format_duration(r.jitter_max),
                    ]
                })
                .collect();
            let mut s = table(&header, &body, Align::Right);
            let c = &plan.config;
            let _ = writeln!(
                s,
                "\ninputs: total {} nodes, cores {} → clients_per_server {}, \
                 server_max_new_conns_per_sec {}; initial {}, max {}, cutoff {}, minimum {}.",
                plan.total,
                plan.cores,
                plan.capacity.clients_per_server,
                plan.capacity.server_max_new_conns_per_sec,
                format_duration(c.initial),
                format_duration(c.max),
                c.factor_cutoff,
                format_duration(c.minimum),
            );
            let _ = writeln!(
                s,
                "final = max(base × live/total, min(live × clients_per_server / \
                 server_max_new_conns_per_sec, max), minimum); jitter of up to jitter_scale × \
                 final ({} × final, the jitter_max column) is added on top.",
                c.jitter_scale
            );
            let _ = writeln!(
                s,
                "note: where the reference's prose and formula disagree (its first table \
                 prints 30s for 100 live of 150), searchwire follows the formula (25s)."
            );
            s
        }
    }
}

/// `explain defaults`: setting, value, why.
pub fn render_defaults() -> String {
    let body: Vec<Vec<String>> = searchwire::explain::table()
        .into_iter()
        .map(|e| vec![e.setting.to_string(), e.value, e.why.to_string()])
        .collect();
    table(&["setting", "value", "why"], &body, Align::Left)
}

/// `explain selection`: each way of choosing nodes, the default first.
pub fn render_selection() -> String {
    let mut s = String::new();
    for (i, sel) in searchwire::Selection::ALL.iter().enumerate() {
        let tag = if i == 0 { " (default)" } else { "" };
        s.push_str(&format!("{sel}{tag}: {}\n", sel.describe()));
        if i + 1 < searchwire::Selection::ALL.len() {
            s.push('\n');
        }
    }
    s.push_str("\nChoose with --selection latency|round-robin, or ClientBuilder::selection.\n");
    s
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Align {
    Left,
    Right,
}

/// An aligned text table; every column but the last is padded (numbers right-aligned when
/// `align` is `Right`), lines have no trailing spaces.
fn table(header: &[&str], rows: &[Vec<String>], align: Align) -> String {
    let width = |s: &str| s.chars().count();
    let mut widths: Vec<usize> = header.iter().map(|h| width(h)).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(width(cell));
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[&str]| {
        let mut l = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let w = widths.get(i).copied().unwrap_or(0);
            let last = i + 1 == cells.len();
            if i > 0 {
                l.push_str("  ");
            }
            match align {
                Align::Right => {
                    let _ = write!(l, "{cell:>w$}");
                }
                Align::Left if last => l.push_str(cell),
                Align::Left => {
                    let _ = write!(l, "{cell:<w$}");
                }
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header);
    for row in rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&cells);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> ResurrectionArgs {
        ResurrectionArgs {
            total: None,
            live: Vec::new(),
            failures: Vec::new(),
            cores: None,
            initial: None,
            max: None,
            cutoff: None,
            minimum: None,
            format: Format::Json,
        }
    }

    #[test]
    fn defaults_cover_every_live_count_with_saturated_base() {
        let plan = Plan::from_args(&args()).unwrap_or_else(|e| panic!("{e}"));
        let rows = plan.rows();
        assert_eq!(rows.len(), 150);
        assert_eq!(rows[0].live, 0);
        assert_eq!(rows[149].live, 149);
        let c = ResurrectionConfig::default();
        let saturated = c.initial.saturating_mul(1 << c.factor_cutoff).min(c.max);
        assert!(rows.iter().all(|r| r.base == saturated));
    }

    #[test]
    fn live_must_be_below_total() {
        let a = ResurrectionArgs {
            total: Some(3),
            live: vec![3],
            ..args()
        };
        let e = Plan::from_args(&a).err().unwrap_or_default();
        assert!(e.contains("--live 3"), "{e}");
    }

    #[test]
    fn selection_explains_both_with_the_default_first() {
        let s = render_selection();
        assert!(
            s.starts_with("latency (default): Each attempt draws two"),
            "{s}"
        );
        assert!(s.contains("\n\nround-robin: Weighted round robin"), "{s}");
        assert!(s.contains("--selection latency|round-robin"), "{s}");
    }

    #[test]
    fn table_aligns_columns() {
        let t = table(
            &["a", "bb"],
            &[vec!["100".into(), "x".into()]],
            Align::Right,
        );
        assert_eq!(t, "  a  bb\n100   x\n");
        let t = table(&["a", "b"], &[vec!["100".into(), "x".into()]], Align::Left);
        assert_eq!(t, "a    b\n100  x\n");
    }
}
