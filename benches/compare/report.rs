//! `results.json` (the figures and the machine they come from) and the page rendered from
//! it: `README.md` with a table per family and an SVG bar chart per family (`plotters`, SVG
//! backend only), and, when that page is the published one (`docs/benchmarks/`), the
//! workspace README's table of headline figures, between its `bench:headline` markers.
//! Rendering reads nothing but `results.json`, so `render` redraws both from a committed file
//! without measuring.

use std::collections::BTreeMap;
use std::error::Error;
use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::{json, Value};

use crate::common::{max, median, min, sig3};

/// The families, in page order: (id, title, what it measures).
pub(crate) const FAMILIES: &[(&str, &str, &str)] = &[
    (
        "bus-publish",
        "Bus: publish",
        "One publisher task, `publish(topic, msg).await` per message, subscribers that only \
         count. `publish/N`: one topic, N subscribers. `publish_topics`: 100 topics, one \
         subscriber each, message `i` to topic `i % 100`. `publish_unbuffered`: one subscriber, \
         the smallest capacity each system has (see below). Time per publish call, whatever \
         the number of subscribers it reaches. A scenario publishes by topic name; its \
         `/resolved` twin publishes through handles every system resolved once before the \
         clock started (ringbus's `Topic`, the peers' senders or subscriber lists; see \
         Method).",
    ),
    (
        "bus-parallel",
        "Bus: 16 publishers at once",
        "As `publish/1` and `publish_topics`, from 16 publisher tasks at once (publisher `p` \
         publishes messages `p, p + 16, ...`), by name and (`/resolved`) through handles \
         resolved once. Wall time from spawning them to joining the last, divided by the \
         number of publish calls (16 calls are in flight at once).",
    ),
    (
        "bus-subscribe",
        "Bus: subscribe + unsubscribe",
        "`subscribe`: subscribe a counting handler to an existing topic, then unsubscribe and \
         wait for its task to end; time per pair. Like for like: every system's subscriber is \
         a task that handles its messages (ringbus's `subscribe` spawns it; for the peers the \
         wiring spawns the task that drains the receiver, as their users must). \
         `subscribe_receiver`: the peers' cheapest subscribe, the receiver alone (a broadcast \
         receiver; a channel added to the fan-out's list), no task: a subscriber polled from \
         a task the user already has. ringbus has no such form; its row there is its \
         `subscribe`, task included. *allocs per pair*: allocations of one subscribe + \
         unsubscribe, counted as for a publish. *tasks per subscription*: measured, not \
         declared: how many more tasks the runtime has alive while one subscription is held \
         (tokio's `num_alive_tasks`, after the round).",
    ),
    (
        "ring-publish",
        "Ring: publish with 1 to 128 readers",
        "`ringbus-core` alone: a plain-thread writer publishes `u64`s one at a time \
         (`blocking_publish`; the peers' blocking sends) to 1, 8, 32 or 128 readers; time per \
         item on the writer. `ring/publish` and `ring/publish_readers/1` are the same \
         configuration measured twice: the gap between them is this run's noise.",
    ),
    (
        "ring-batch",
        "Ring: batches and in-place fill",
        "One reader; the writer publishes batches of 1 to 1000 (`blocking_publish_batch`; the \
         disruptor's `batch_publish`), or reserves 100 slots and fills them in place \
         (`reserve_fill`). Time per item. The channel peers have no batch publish.",
    ),
    (
        "ring-read",
        "Ring: the reader alone",
        "One thread fills the queue (untimed), then drains it (timed), lap after lap: the \
         receive path alone, no cross-core traffic, no waiting. Time per item.",
    ),
    (
        "ring-stages",
        "Ring: pipelines of stages",
        "A writer and 1 to 3 chained stages, one thread each; each stage sees an item only after \
         the one before it (`Stage::then`; the disruptor's `and_then`; for the channels, a \
         chain of threads each forwarding into the next channel). Time per item on the writer.",
    ),
];

/// System order on the page and its colour.
pub(crate) const SYSTEMS: &[(&str, RGBColor)] = &[
    ("ringbus", RGBColor(214, 39, 40)),
    ("ringbus-batch", RGBColor(227, 119, 194)),
    ("disruptor", RGBColor(127, 127, 127)),
    ("tokio-broadcast", RGBColor(31, 119, 180)),
    ("async-broadcast", RGBColor(44, 160, 44)),
    ("tokio-mpsc-fanout", RGBColor(148, 103, 189)),
    ("kanal-fanout", RGBColor(255, 127, 14)),
    ("kanal-fanout-budget", RGBColor(188, 189, 34)),
    ("kanal-acked", RGBColor(23, 190, 207)),
    ("flume-fanout", RGBColor(140, 86, 75)),
];

/// ringbus's wirings other than the reference one: not peers (kept out of the per-peer
/// lists; their ratio column is their time over one-message ringbus's).
const WIRINGS: &[&str] = &["ringbus-batch"];

/// The peers that may lose messages: never "the best lossless peer".
const LOSSY: &[&str] = &["tokio-broadcast"];

fn system_rank(s: &str) -> usize {
    SYSTEMS
        .iter()
        .position(|(n, _)| *n == s)
        .unwrap_or(usize::MAX)
}

/// What the rounds of one (scenario, system) measured.
pub(crate) struct Figure {
    pub(crate) scenario: String,
    pub(crate) family: &'static str,
    pub(crate) unit: &'static str,
    pub(crate) system: &'static str,
    pub(crate) messages: u64,
    pub(crate) rounds_ns: Vec<f64>,
    pub(crate) allocs_per_op: Vec<f64>,
    pub(crate) lost: u64,
    pub(crate) deliveries: u64,
    /// Tasks one subscription keeps alive (the subscribe scenarios), the highest of the
    /// rounds.
    pub(crate) tasks: Option<u64>,
}

/// Per-round ratios `peer / ringbus` (rounds are interleaved, so round `r` of both ran
/// back to back).
pub(crate) fn ratios(peer: &[f64], ringbus: &[f64]) -> Vec<f64> {
    peer.iter().zip(ringbus).map(|(p, r)| p / r).collect()
}

/// The JSON object of one figure.
pub(crate) fn figure_json(f: &Figure, ringbus: Option<&Figure>) -> Value {
    let mut o = json!({
        "scenario": f.scenario,
        "system": f.system,
        "family": f.family,
        "unit": format!("ns per {}", f.unit),
        "median_ns": sig3(median(&f.rounds_ns)),
        "min_ns": sig3(min(&f.rounds_ns)),
        "max_ns": sig3(max(&f.rounds_ns)),
        "allocs_per_op": sig3(median(&f.allocs_per_op)),
        "allocs_per_op_max": sig3(max(&f.allocs_per_op)),
        "lost": f.lost,
        "deliveries": f.deliveries,
        "messages_per_round": f.messages,
        "rounds_ns": f.rounds_ns.iter().map(|x| sig3(*x)).collect::<Vec<_>>(),
    });
    if let Some(t) = f.tasks {
        o["tasks_per_subscription"] = json!(t);
    }
    if let Some(r) = ringbus.filter(|r| r.system != f.system) {
        let q = ratios(&f.rounds_ns, &r.rounds_ns);
        o["ratio_to_ringbus"] = json!({
            "median": sig3(median(&q)),
            "min": sig3(min(&q)),
            "max": sig3(max(&q)),
        });
    }
    o
}

// ---------------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------------

/// Formats nanoseconds for people, three significant digits at most.
pub(crate) fn fmt_ns(ns: f64) -> String {
    fn three(x: f64) -> String {
        if x < 10.0 {
            format!("{x:.2}")
        } else if x < 100.0 {
            format!("{x:.1}")
        } else {
            format!("{x:.0}")
        }
    }
    if !ns.is_finite() {
        "-".into()
    } else if ns < 1_000.0 {
        format!("{} ns", three(ns))
    } else if ns < 1_000_000.0 {
        format!("{} µs", three(ns / 1e3))
    } else {
        format!("{} ms", three(ns / 1e6))
    }
}

/// Formats a count for people (k, M, G).
fn fmt_count(n: u64) -> String {
    let x = n as f64;
    if n < 10_000 {
        n.to_string()
    } else if x < 1e6 {
        format!("{:.1} k", x / 1e3)
    } else if x < 1e9 {
        format!("{:.1} M", x / 1e6)
    } else {
        format!("{:.2} G", x / 1e9)
    }
}

fn fmt_ratio(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or(f64::NAN)
}

fn text(v: &Value, key: &str) -> String {
    match &v[key] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// One figure as the renderer reads it back.
struct Row {
    scenario: String,
    system: String,
    median: f64,
    min: f64,
    max: f64,
    allocs: f64,
    lost: u64,
    deliveries: u64,
    ratio: Option<(f64, f64, f64)>,
    tasks: Option<u64>,
    /// The time of each round, in run order.
    rounds: Vec<f64>,
}

fn rows(results: &Value) -> Vec<Row> {
    let empty = Vec::new();
    results["figures"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|f| Row {
            scenario: text(f, "scenario"),
            system: text(f, "system"),
            median: num(f, "median_ns"),
            min: num(f, "min_ns"),
            max: num(f, "max_ns"),
            allocs: num(f, "allocs_per_op"),
            lost: f["lost"].as_u64().unwrap_or(0),
            deliveries: f["deliveries"].as_u64().unwrap_or(0),
            tasks: f["tasks_per_subscription"].as_u64(),
            rounds: f["rounds_ns"]
                .as_array()
                .map(|v| v.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default(),
            ratio: f.get("ratio_to_ringbus").map(|r| {
                (
                    r["median"].as_f64().unwrap_or(f64::NAN),
                    r["min"].as_f64().unwrap_or(f64::NAN),
                    r["max"].as_f64().unwrap_or(f64::NAN),
                )
            }),
        })
        .collect()
}

/// Scenarios of a family, in run order.
fn family_scenarios(results: &Value, family: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for f in results["figures"].as_array().into_iter().flatten() {
        let s = text(f, "scenario");
        if text(f, "family") == family && !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

fn short(scenario: &str) -> &str {
    scenario.strip_prefix("ring/").unwrap_or(scenario)
}

/// Draws one family's bar chart: per scenario a bar per system (median), whiskers from the
/// fastest to the slowest round, log scale.
fn chart(
    path: &Path,
    title: &str,
    scenarios: &[String],
    all: &[Row],
) -> Result<(), Box<dyn Error>> {
    let systems: Vec<&str> = SYSTEMS
        .iter()
        .map(|(s, _)| *s)
        .filter(|s| {
            all.iter()
                .any(|r| r.system == *s && scenarios.contains(&r.scenario))
        })
        .collect();
    let data: Vec<&Row> = all
        .iter()
        .filter(|r| scenarios.contains(&r.scenario) && r.median.is_finite())
        .collect();
    let lo = data.iter().map(|r| r.min).fold(f64::INFINITY, f64::min);
    let hi = data.iter().map(|r| r.max).fold(0.0, f64::max);
    let (ylo, yhi) = (
        10f64.powf((lo / 1.5).log10().floor()),
        10f64.powf((hi * 1.5).log10().ceil()),
    );
    let (width, height) = (1000u32, 460u32);
    let root = SVGBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (plot, legend) = root.split_horizontally(width - 200);
    let mut chart = ChartBuilder::on(&plot)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(52)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..scenarios.len() as f64, (ylo..yhi).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(scenarios.len() + 1)
        .x_label_formatter(&|_| String::new())
        .y_desc("time per op (log scale)")
        .y_label_formatter(&|v| fmt_ns(*v))
        .draw()?;
    for (i, sc) in scenarios.iter().enumerate() {
        let here: Vec<&&Row> = systems
            .iter()
            .filter_map(|s| data.iter().find(|r| r.scenario == *sc && r.system == *s))
            .collect();
        let w = 0.8 / here.len().max(1) as f64;
        for (j, r) in here.iter().enumerate() {
            let colour = SYSTEMS[system_rank(&r.system)].1;
            let x0 = i as f64 + 0.1 + j as f64 * w;
            let xc = x0 + w / 2.0;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x0 + 0.08 * w, ylo), (x0 + 0.92 * w, r.median)],
                colour.filled(),
            )))?;
            let whisker = BLACK.stroke_width(1);
            chart.draw_series([
                PathElement::new(vec![(xc, r.min), (xc, r.max)], whisker),
                PathElement::new(vec![(xc - w / 5.0, r.min), (xc + w / 5.0, r.min)], whisker),
                PathElement::new(vec![(xc - w / 5.0, r.max), (xc + w / 5.0, r.max)], whisker),
            ])?;
        }
        let (px, py) = chart.backend_coord(&(i as f64 + 0.5, ylo));
        // A `/resolved` twin's label on two lines, so neighbours do not overlap.
        let label = short(sc);
        let lines = match label.strip_suffix("/resolved") {
            Some(base) => vec![base, "(resolved)"],
            None => vec![label],
        };
        for (k, line) in lines.into_iter().enumerate() {
            root.draw(&Text::new(
                line.to_string(),
                (px, py + 8 + 16 * k as i32),
                ("sans-serif", 14)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Center, VPos::Top)),
            ))?;
        }
    }
    let font = ("sans-serif", 14).into_font().color(&BLACK);
    for (j, s) in systems.iter().enumerate() {
        let y = 50 + 24 * j as i32;
        let colour = SYSTEMS[system_rank(s)].1;
        legend.draw(&Rectangle::new([(8, y), (22, y + 14)], colour.filled()))?;
        let name = if *s == "tokio-broadcast" {
            format!("{s} (lossy)")
        } else {
            s.to_string()
        };
        legend.draw(&Text::new(name, (30, y), font.clone()))?;
    }
    let y = 50 + 24 * systems.len() as i32 + 10;
    legend.draw(&Text::new("bar: median", (8, y), font.clone()))?;
    legend.draw(&Text::new("whiskers: min-max", (8, y + 18), font.clone()))?;
    legend.draw(&Text::new("of the rounds", (8, y + 36), font))?;
    root.present()?;
    Ok(())
}

/// Whether ringbus was faster than a peer in every round (`Some(true)`), slower in every
/// round (`Some(false)`), or neither.
fn verdict(ratio: (f64, f64, f64)) -> Option<bool> {
    if ratio.1 > 1.0 {
        Some(true)
    } else if ratio.2 < 1.0 {
        Some(false)
    } else {
        None
    }
}

fn lost_cell(r: &Row) -> String {
    if r.lost == 0 {
        "0".into()
    } else {
        format!(
            "**{:.1}%** ({} of {})",
            100.0 * r.lost as f64 / r.deliveries.max(1) as f64,
            fmt_count(r.lost),
            fmt_count(r.deliveries)
        )
    }
}

fn machine_table(results: &Value, md: &mut String) {
    let m = &results["machine"];
    let run = &results["run"];
    let crates = m["crates"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| format!("{k} {}", v.as_str().unwrap_or("?")))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    let la = |key: &str| {
        run[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| format!("{:.2}", x.as_f64().unwrap_or(f64::NAN)))
                    .collect::<Vec<_>>()
                    .join(" / ")
            })
            .unwrap_or_default()
    };
    let features = m["target_features_beyond_baseline"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    let _ = writeln!(md, "| | |\n|---|---|");
    let rows = [
        ("date (UTC)", text(m, "date")),
        (
            "code",
            format!(
                "commit `{}`{}",
                text(m, "commit"),
                if m["uncommitted_changes"].as_bool() == Some(true) {
                    " plus uncommitted changes in the work tree"
                } else {
                    ""
                }
            ),
        ),
        (
            "CPU",
            format!(
                "{} ({}), {} cores visible{}",
                text(m, "cpu"),
                text(m, "cpu_family_model"),
                text(m, "cores"),
                if m["virtualized"].as_bool() == Some(true) {
                    ", virtual machine"
                } else {
                    ""
                }
            ),
        ),
        ("memory", format!("{} GiB", text(m, "memory_gib"))),
        ("OS", text(m, "os")),
        (
            "compiler",
            format!("{}, LLVM {}", text(m, "rustc"), text(m, "llvm")),
        ),
        ("profile", text(m, "build_profile")),
        (
            "RUSTFLAGS",
            format!(
                "`{}`; target features beyond the x86-64 baseline compiled in: {}",
                text(m, "rustflags"),
                if features.is_empty() {
                    "none".to_string()
                } else {
                    features
                }
            ),
        ),
        ("crates", crates),
        (
            "run",
            format!(
                "`{}`, {} rounds, {:.0} s in all",
                text(run, "command"),
                text(run, "rounds"),
                num(run, "duration_s")
            ),
        ),
        (
            "load",
            format!(
                "other processes used {:.1}% of the machine's CPU time during the run (per \
                 round: {}), the hypervisor stole {:.1}%; load average (1 / 5 / 15 min) {} \
                 at the start, {} at the end, highest 1-min reading {:.2} (the load average \
                 counts this run's own threads, which keep both cores busy: the CPU shares \
                 are the measure of foreign load)",
                100.0 * num(run, "foreign_cpu_share"),
                run["foreign_cpu_share_per_round"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|x| format!("{:.1}%", 100.0 * x.as_f64().unwrap_or(f64::NAN)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_else(|| "-".into()),
                100.0 * num(run, "steal_cpu_share"),
                la("load_average_start"),
                la("load_average_end"),
                num(run, "load_average_1m_max"),
            ),
        ),
    ];
    for (k, v) in rows {
        let _ = writeln!(md, "| {k} | {v} |");
    }
}

/// Renders `README.md` and the family charts in `dir` from `dir/results.json`.
pub(crate) fn render(dir: &Path) -> Result<(), Box<dyn Error>> {
    let results: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("results.json"))?)?;
    let all = rows(&results);
    let rounds = text(&results["run"], "rounds");
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# ringbus beside its peers\n\n\
         <!-- Rendered by `benches/compare.rs` from `results.json`; do not edit by hand: \
         `just bench` re-measures, `just bench render` redraws. -->\n\n\
         Every scenario of the suite's benchmark rules (`BENCHMARKS.md`) for `ringbus` and the \
         peers a user would pick instead, measured in one run, rounds interleaved. Lower is \
         better everywhere. **ratio** = peer time / ringbus time in the same round: above 1, \
         ringbus was faster; the median of the per-round ratios is shown with their min and \
         max.\n\n\
         Reproduce: `just bench` (about 12 minutes here, writes this page), `just bench quick` \
         (under 3 minutes, writes to `target/tmp/compare-quick/`), `just bench render` \
         (redraws this page from `results.json`).\n"
    );
    let _ = writeln!(md, "## Where these numbers come from\n");
    machine_table(&results, &mut md);
    md.push('\n');
    md.push_str(&method(&rounds, &text(&results["run"], "target_window_ms")));
    md.push_str(&headline(&results, &all));

    let _ = writeln!(md, "## Results\n");
    for (family, title, about) in FAMILIES {
        let scenarios = family_scenarios(&results, family);
        if scenarios.is_empty() {
            continue;
        }
        let _ = writeln!(md, "### {title}\n\n{about}\n");
        let svg = format!("{family}.svg");
        match chart(&dir.join(&svg), title, &scenarios, &all) {
            Ok(()) => {
                let _ = writeln!(md, "![{title}]({svg})\n");
            }
            Err(e) => eprintln!("could not draw {svg}: {e}"),
        }
        // The subscribe family says per pair what it allocates and what it spawns.
        let subscribe = *family == "bus-subscribe";
        let _ = writeln!(
            md,
            "| scenario | system | median | min – max | ratio (peer / ringbus) | {} | {} |\n\
             |---|---|---:|---:|---:|---:|---:|",
            if subscribe {
                "allocs per pair"
            } else {
                "allocs/op"
            },
            if subscribe {
                "tasks per subscription"
            } else {
                "lost"
            }
        );
        for sc in &scenarios {
            let mut here: Vec<&Row> = all.iter().filter(|r| &r.scenario == sc).collect();
            here.sort_by_key(|r| system_rank(&r.system));
            for r in here {
                let ratio = match r.ratio {
                    Some((m, lo, hi)) => format!(
                        "{}{}{} [{} – {}]",
                        if verdict((m, lo, hi)).is_some() {
                            "**"
                        } else {
                            ""
                        },
                        fmt_ratio(m),
                        if verdict((m, lo, hi)).is_some() {
                            "**"
                        } else {
                            ""
                        },
                        fmt_ratio(lo),
                        fmt_ratio(hi)
                    ),
                    None => "1".into(),
                };
                let system = if r.system == "ringbus" {
                    "**ringbus**".to_string()
                } else {
                    r.system.clone()
                };
                let _ = writeln!(
                    md,
                    "| `{sc}` | {system} | {} | {} – {} | {ratio} | {} | {} |",
                    fmt_ns(r.median),
                    fmt_ns(r.min),
                    fmt_ns(r.max),
                    if r.allocs.is_finite() {
                        format!("{:.3}", r.allocs)
                    } else {
                        "-".into()
                    },
                    if subscribe {
                        r.tasks.map_or("-".into(), |t| t.to_string())
                    } else {
                        lost_cell(r)
                    }
                );
            }
        }
        md.push('\n');
        md.push_str(&family_summary(&scenarios, &all));
    }
    match results.get("latency").filter(|v| !v.is_null()) {
        Some(lat) => md.push_str(&latency_section(lat)),
        None => md.push_str(
            "### Latency\n\nNot folded in: there was no `docs/benchmarks/latency.json` when \
             this page was rendered. `just latency` writes it; `just bench render` then adds \
             its percentiles here without re-measuring the rest.\n\n",
        ),
    }
    md.push_str(&goals(&all));
    md.push_str(&conclusions(&all));
    std::fs::write(dir.join("README.md"), md)?;
    if is_published(dir) {
        let readme = workspace().join("README.md");
        if update_between_markers(&readme, README_MARKER, &readme_table(&results, &all))? {
            println!("updated the \"How fast\" table of README.md");
        } else {
            println!("README.md has no `{README_MARKER}` markers: its table was left as it is");
        }
    }
    Ok(())
}

/// The workspace's root directory (this package lives in `benches/`).
fn workspace() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Whether `dir` is `docs/benchmarks/`, the published figures: only a page rendered from
/// them rewrites the workspace README's table (not a quick, partial or `--out` run).
fn is_published(dir: &Path) -> bool {
    match (
        dir.canonicalize(),
        workspace().join("docs/benchmarks").canonicalize(),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// The workspace README's table of headline figures sits between `<!-- {README_MARKER} ...
/// -->` and `<!-- /{README_MARKER} -->`.
const README_MARKER: &str = "bench:headline";

/// The README's rows: (scenario, how the README names it).
const README_ROWS: &[(&str, &str)] = &[
    ("publish/1", "`publish/1` (1 subscriber)"),
    ("publish/100", "`publish/100` (100 subscribers)"),
    ("publish_parallel", "`publish_parallel` (16 publishers)"),
    ("subscribe", "`subscribe` + unsubscribe"),
];

/// The README's peers, the lossless ones: (system, how the README names it).
const README_PEERS: &[(&str, &str)] = &[
    ("tokio-mpsc-fanout", "`tokio` mpsc fan-out"),
    ("async-broadcast", "`async-broadcast`"),
    ("kanal-fanout", "`kanal` fan-out"),
    ("kanal-fanout-budget", "`kanal` fan-out + budget"),
    ("flume-fanout", "`flume` fan-out"),
];

/// The workspace README's table: a caption naming the run, then per row ringbus's median and
/// each lossless peer's ratio, median [min – max]. Links are relative to the workspace root.
fn readme_table(results: &Value, all: &[Row]) -> String {
    let m = &results["machine"];
    let date = text(m, "date");
    // `2026-12-03T06:27:29Z` is shown as `2026-12-03 06:27 UTC`.
    let date = match date.get(..16) {
        Some(minute) if date.contains('T') => format!("{} UTC", minute.replacen('T', " ", 1)),
        _ => date,
    };
    let virtualized = m["virtualized"].as_bool() == Some(true);
    let caption = format!(
        "From the `{}` run of {date} at {}{} (a {}-{} {} {}, {} interleaved rounds; \
         [`results.json`](docs/benchmarks/results.json)): ringbus's median time per \
         operation, and each lossless peer's time divided by ringbus's in the same round, \
         median [min – max]. Above 1: ringbus was faster.",
        text(&results["run"], "command"),
        text(m, "commit"),
        if m["uncommitted_changes"].as_bool() == Some(true) {
            " plus uncommitted changes"
        } else {
            ""
        },
        text(m, "cores"),
        if virtualized { "vCPU" } else { "core" },
        text(m, "cpu"),
        if virtualized {
            "virtual machine"
        } else {
            "machine"
        },
        text(&results["run"], "rounds"),
    );
    let mut s = wrap(&caption, 96);
    s.push('\n');
    let names: Vec<&str> = README_PEERS.iter().map(|(_, name)| *name).collect();
    let _ = writeln!(
        s,
        "| scenario | ringbus | {} |\n|---|---:|{}",
        names.join(" | "),
        "---:|".repeat(names.len())
    );
    let find = |sc: &str, sys: &str| all.iter().find(|r| r.scenario == sc && r.system == sys);
    for (sc, label) in README_ROWS {
        let ringbus = find(sc, "ringbus").map_or("-".into(), |r| fmt_ns(r.median));
        let cells: Vec<String> = README_PEERS
            .iter()
            .map(|(peer, _)| match find(sc, peer).and_then(|r| r.ratio) {
                Some((m, lo, hi)) => {
                    format!("{} [{} – {}]", fmt_ratio(m), fmt_ratio(lo), fmt_ratio(hi))
                }
                None => "-".into(),
            })
            .collect();
        let _ = writeln!(s, "| {label} | {ringbus} | {} |", cells.join(" | "));
    }
    s.push('\n');
    s
}

/// `text` with its spaces turned into line breaks where a line would pass `width` characters,
/// never inside brackets (`[min – max]` stays on one line); each line ends with `\n`.
fn wrap(text: &str, width: usize) -> String {
    let mut units: Vec<String> = Vec::new();
    let mut open = false;
    for word in text.split_whitespace() {
        match units.last_mut() {
            Some(unit) if open => {
                unit.push(' ');
                unit.push_str(word);
            }
            _ => units.push(word.to_string()),
        }
        if word.contains('[') {
            open = true;
        }
        if word.contains(']') {
            open = false;
        }
    }
    let mut out = String::new();
    let mut line = 0;
    for unit in units {
        let n = unit.chars().count();
        if line > 0 && line + 1 + n > width {
            out.push('\n');
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(&unit);
        line += n;
    }
    out.push('\n');
    out
}

/// Replaces what lies between the line that starts with `<!-- {marker}` and the marker
/// `<!-- /{marker} -->` of the file at `path` by `body`, keeping both marker lines; false if
/// the file lacks them. Rewrites the file only if that changes it.
fn update_between_markers(path: &Path, marker: &str, body: &str) -> std::io::Result<bool> {
    let page = std::fs::read_to_string(path)?;
    let (start, end) = (format!("<!-- {marker}"), format!("<!-- /{marker} -->"));
    let Some(a) = page.find(&start) else {
        return Ok(false);
    };
    // The body starts on the line after the start marker's.
    let Some(a) = page[a..].find('\n').map(|n| a + n + 1) else {
        return Ok(false);
    };
    let Some(b) = page[a..].find(&end).map(|n| a + n) else {
        return Ok(false);
    };
    let updated = format!("{}{body}{}", &page[..a], &page[b..]);
    if updated != page {
        std::fs::write(path, updated)?;
    }
    Ok(true)
}

/// Every scenario in one table: ringbus's median and each peer's ratio.
fn headline(results: &Value, all: &[Row]) -> String {
    let mut s = String::from(
        "## At a glance\n\n\
         ringbus's median time per operation, and each peer's time divided by ringbus's in \
         the same round: median of the rounds [min – max]. Above 1: ringbus was faster. Bold: \
         the same side of 1 in every round. `tokio-broadcast` is lossy (see the *lost* column \
         below): its ratio is not a like-for-like comparison where it lost messages. \
         `ringbus-batch` is not a peer but ringbus with batch subscribers \
         (`subscribe_batch`), as the fan-outs' subscribers take what is queued with their \
         channel's batch receive: its column is its time over one-message ringbus's, below 1 \
         where batch subscribers made it faster.\n\n",
    );
    let peers: Vec<&str> = SYSTEMS
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| *p != "ringbus" && all.iter().any(|r| r.system == *p))
        .collect();
    let _ = writeln!(
        s,
        "| scenario | ringbus | {} |\n|---|---:|{}",
        peers.join(" | "),
        "---:|".repeat(peers.len())
    );
    for (family, _, _) in FAMILIES {
        for sc in family_scenarios(results, family) {
            let Some(rb) = all
                .iter()
                .find(|r| r.scenario == sc && r.system == "ringbus")
            else {
                continue;
            };
            let cells: Vec<String> = peers
                .iter()
                .map(|p| {
                    match all
                        .iter()
                        .find(|r| r.scenario == sc && r.system == *p)
                        .and_then(|r| r.ratio.map(|q| (q, r.lost > 0)))
                    {
                        Some(((m, lo, hi), lossy)) => {
                            let b = if verdict((m, lo, hi)).is_some() {
                                "**"
                            } else {
                                ""
                            };
                            format!(
                                "{b}{}{b} [{} – {}]{}",
                                fmt_ratio(m),
                                fmt_ratio(lo),
                                fmt_ratio(hi),
                                if lossy { " (lossy)" } else { "" }
                            )
                        }
                        None => String::new(),
                    }
                })
                .collect();
            let _ = writeln!(
                s,
                "| `{sc}` | {} | {} |",
                fmt_ns(rb.median),
                cells.join(" | ")
            );
        }
    }
    s.push('\n');
    s
}

/// Where ringbus stood against one peer over a family's scenarios.
#[derive(Default)]
struct Standing {
    peer: String,
    faster: Vec<String>,
    slower: Vec<String>,
    mixed: Vec<String>,
}

/// Per peer, where ringbus was faster or slower in every round.
fn family_summary(scenarios: &[String], all: &[Row]) -> String {
    let mut by_peer: BTreeMap<usize, Standing> = BTreeMap::new();
    for r in all
        .iter()
        .filter(|r| scenarios.contains(&r.scenario) && !WIRINGS.contains(&r.system.as_str()))
    {
        let Some(ratio) = r.ratio else { continue };
        let e = by_peer
            .entry(system_rank(&r.system))
            .or_insert_with(|| Standing {
                peer: r.system.clone(),
                ..Standing::default()
            });
        let item = format!("`{}` {}x", short(&r.scenario), fmt_ratio(ratio.0));
        match verdict(ratio) {
            Some(true) => e.faster.push(item),
            Some(false) => e.slower.push(item),
            None => e.mixed.push(item),
        }
    }
    let mut s = String::from(
        "Against each peer (ratio medians; faster or slower means in every round):\n\n",
    );
    let list = |v: &Vec<String>| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    for st in by_peer.values() {
        let _ = writeln!(
            s,
            "- {}: ringbus faster in {}; slower in {}; rounds disagree in {}.",
            st.peer,
            list(&st.faster),
            list(&st.slower),
            list(&st.mixed)
        );
    }
    s.push('\n');
    s
}

fn method(rounds: &str, target_ms: &str) -> String {
    format!(
        "## Method\n\n\
         - **One process, interleaved rounds, spread over the run.** Every system of every \
         scenario first warms up (untimed for the results). Then {rounds} rounds run, \
         round-major: each round runs every scenario, and within a scenario every system \
         once, back to back, in the same order (A B C ... A B C ...). So the systems of a \
         round share the machine's state of that moment, and each scenario's rounds are \
         spread over the whole run: this VM has states that last from seconds to minutes \
         (load from other users, and most likely where the hypervisor places the two \
         vCPUs), which show as spread between rounds rather than shifting one scenario as a \
         whole. A figure is the median of the rounds with the fastest and slowest round; a \
         ratio is computed per round and its median, min and max are shown.\n\
         - **Fixed work per round.** The warm-up also sizes the rounds: a system runs with 8 \
         times more operations each time (from 4 laps of its queue) until one run lasts an \
         eighth of the target window, {target_ms} ms; its round size is then fixed for every \
         round so that its timed window lasts about that long (`messages_per_round` in \
         `results.json`). Systems of one scenario may get different round sizes, since \
         their costs differ by up to a thousand times; a figure is the time of the \
         publishing side divided by the round's operations.\n\
         - **Every round is checked.** After the clock stops, the round closes its queue or \
         bus (untimed: each system drains what was queued, then its subscribers end) and \
         checks every subscriber's or reader's count and sum exactly. The lossy \
         `tokio-broadcast` must account for every message as received or reported lost \
         (`Lagged`); what it lost is the *lost* column. A round that fails a check aborts the \
         run.\n\
         - **Allocations.** A counting `#[global_allocator]` in the bench binary counts every \
         allocation and reallocation, on every thread, during the timed window only (not \
         while building, closing or checking); *allocs/op* is that count over the \
         operations of the round (median of the rounds). Subscribers still working after the \
         window are not counted.\n\
         - **Bus scenarios** run on one tokio multi-thread runtime with 2 workers: \
         publishers and subscribers are tasks on it. Every subscriber only counts (its own \
         cache-padded counter). Each round builds a fresh bus. Every system gets its \
         strongest reasonable wiring, as a performance-minded user would write it (each \
         choice is argued in `benches/common/bus_peers.rs`), every queue holding 1024 `u64`s \
         unless a scenario says otherwise:\n  \
           - `ringbus`: `bus.publish(name, msg).await` by name, `topic.publish(msg).await` \
         through a `Topic` resolved once (`bus.topic::<u64>(name)`); subscribers \
         `bus.subscribe(name, |m: &u64| ...)`;\n  \
           - `ringbus-batch`: the same bus and publishes, with batch subscribers \
         (`bus.subscribe_batch(name, options, |batch: Batch<'_, u64>| ...)`: one handler \
         call for what is queued, as the fan-outs' subscribers take it);\n  \
           - the peers' topic registries: a `dashmap::DashMap<String, _>` (sharded locks, \
         never one lock every publisher shares), hashed with FNV-1a as ringbus hashes names \
         (the std SipHash took about twice as long on these names when measured here); a \
         lookup holds its shard's read lock only around synchronous code, and a publish that \
         awaits clones the topic's `Arc` out first. In the `/resolved` rows each topic is \
         resolved once before the clock starts: tokio's `broadcast::Sender`, \
         async-broadcast's channel, the fan-out's subscriber list (a snapshot, which would \
         miss a later subscriber: the fan-out's best case, since no scenario subscribes while \
         publishing);\n  \
           - `tokio-broadcast`: `send`, then `tokio::task::coop::consume_budget().await` \
         (why: see *tokio-broadcast's losses* below); lossy;\n  \
           - `async-broadcast`: overflow off (publishers wait), `broadcast_direct` / \
         `recv_direct` (its allocation-free forms);\n  \
           - `tokio-mpsc-fanout`, `kanal-fanout`, `flume-fanout`: copy-on-write subscriber \
         lists (`Arc<[(id, Sender)]>`), one bounded channel per subscriber; a publish sends \
         to each in turn and waits for room (the Go-bus design); a subscriber takes what is \
         there with the channel's batch receive (`recv_many`, `drain_into`, `try_iter`);\n  \
           - `kanal-fanout-budget`: `kanal-fanout` spending tokio's cooperative budget as \
         ringbus must (guarantee 11): `consume_budget` once per send and once per up to 8 \
         messages received. kanal's futures know nothing of tokio's budget, so raw kanal's \
         publisher yields only at a full queue and its subscriber only at an empty one; this \
         is the like-for-like peer the contention goals are held against;\n  \
           - `kanal-acked` (`publish_unbuffered` only): `kanal-fanout-budget` whose send \
         also waits for the subscriber's answer, sent on a second channel (capacity 1) once \
         it has handled the message: the guarantee of ringbus's unbuffered publish. Its \
         subscriber takes one message at a time (each is answered before the next).\n\
         - **tokio-broadcast's losses.** Earlier runs of this page showed `tokio-broadcast` \
         losing 100.0 % of `publish/1` (79.2 M of 79.2 M) at 45 ns a publish: its subscriber \
         never ran while the publisher did. `broadcast::Sender::send` is synchronous and, \
         unlike tokio's mpsc and ringbus, spends none of the task's cooperative budget, so a \
         publishing loop never yields. The first send wakes the parked subscriber from a \
         worker thread, and tokio puts a task woken there into that worker's LIFO slot, which \
         the other worker cannot steal and is not told about. So the subscriber waited for \
         the whole timed window, then received exactly the last queue's worth (9 rounds x \
         1,024 of 79.2 M; 9 x 1 at capacity 1 in `publish_unbuffered`) and was told it had \
         lost the rest: the figure was the cost of `send` into a queue nobody read. A user \
         would see a subscriber that receives nothing and add a yield point; the publisher \
         now spends tokio's budget after each send (`consume_budget`, tokio's tool for a \
         loop that would never yield), which makes it exactly as cooperative as ringbus's \
         publish and tokio's mpsc send (a yield after 128 operations). Its subscriber now \
         runs, and the *lost* column is what remains: a subscriber that cannot keep up with a \
         publisher that never waits for it (with 16 publishers and one subscriber on 2 \
         workers, most of it). The kanal, flume and async-broadcast publishers spend no tokio \
         budget either, but they wait when a queue is full, which lets their subscriber run \
         once per queue's worth.\n\
         - **`publish_unbuffered`** is like for like against `kanal-acked` only: ringbus's \
         capacity 0 returns once the handler *has run*, as kanal-acked's send does; `kanal` \
         and `flume` at capacity 0 are rendezvous channels (a send returns once a receiver \
         *took* the message); `tokio-broadcast`, `async-broadcast` and `tokio-mpsc` cannot \
         go below 1 (a send returns once the message is *queued*).\n\
         - **Ring scenarios** drive `ringbus-core` directly: the writer is the benchmark's \
         thread, each round builds a fresh ring and readers (threads for 1 and 8 readers \
         and for stages; tasks on a one-worker tokio runtime for 32 and 128, where the \
         disruptor, which has no async consumer, is left out). `disruptor` consumers \
         busy-spin (its design: a core per consumer), so with more consumers than the 2 cores \
         its figure measures oversubscription as much as the crate. The fan-out peers use one \
         channel per reader and their batch receive (`recv_many`, `drain_into`, `try_iter`).\n\
         - **Build:** `cargo bench` profile, `RUSTFLAGS` cleared by the recipe (no \
         `target-cpu=native`), so another x86-64 machine builds the same code.\n\n"
    )
}

fn latency_section(lat: &Value) -> String {
    let blocks = lat["figures"]
        .get(0)
        .map_or_else(|| "-".to_string(), |f| text(f, "blocks"));
    let mut s = format!(
        "### Latency (folded in from `latency.json`)\n\n\
         Measured separately by `just latency` (`benches/latency.rs`: its own run, {blocks} \
         blocks per row, each running every system once in a random order, medians; the \
         publisher and the subscribers are tasks on a 2-worker runtime): end-to-end latency \
         from the message's *intended* send time (coordinated omission accounted for), \
         writer stall and reader lag, in microseconds. See `latency.md` for the method.\n\n",
    );
    let _ = writeln!(
        s,
        "Measured {} on {} ({} cores).\n\n\
         | scenario | system | e2e p50 | e2e p99 | e2e p99.9 | e2e max | stall p99 | lag p99 | lost |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|",
        text(lat, "date"),
        text(lat, "cpu"),
        text(lat, "cores")
    );
    let us = |f: &Value, k: &str| format!("{:.1}", num(f, k) / 1000.0);
    for f in lat["figures"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} |",
            text(f, "scenario"),
            text(f, "system"),
            us(f, "e2e_p50_ns"),
            us(f, "e2e_p99_ns"),
            us(f, "e2e_p999_ns"),
            us(f, "e2e_max_ns"),
            us(f, "stall_p99_ns"),
            us(f, "lag_p99_ns"),
            text(f, "lost"),
        );
    }
    s.push('\n');
    s
}

/// `median [min – max]` of per-round values.
fn spread(v: &[f64]) -> String {
    format!(
        "{} [{} – {}]",
        fmt_ratio(median(v)),
        fmt_ratio(min(v)),
        fmt_ratio(max(v))
    )
}

/// The rows whose goals compare ringbus with kanal's fan-out (with and without tokio's
/// budget): one subscriber per topic, and many publishers.
const KANAL_ROWS: &[&str] = &[
    "publish/1",
    "publish/1/resolved",
    "publish_topics",
    "publish_topics/resolved",
    "publish_unbuffered",
    "publish_parallel",
    "publish_parallel/resolved",
    "publish_parallel_topics",
    "publish_parallel_topics/resolved",
];

/// The many-publisher penalty's pairs: (16 publishers, the same scenario from one).
const PENALTY_PAIRS: &[(&str, &str)] = &[
    ("publish_parallel", "publish/1"),
    ("publish_parallel/resolved", "publish/1/resolved"),
    ("publish_parallel_topics", "publish_topics"),
    (
        "publish_parallel_topics/resolved",
        "publish_topics/resolved",
    ),
];

/// Per-round ratios of scenario `a`'s time of `sa` over scenario `b`'s time of `sb`, when
/// both ran every round.
fn round_ratios(all: &[Row], (a, sa): (&str, &str), (b, sb): (&str, &str)) -> Option<Vec<f64>> {
    let find = |sc: &str, sys: &str| all.iter().find(|r| r.scenario == sc && r.system == sys);
    let (x, y) = (find(a, sa)?, find(b, sb)?);
    (x.rounds.len() == y.rounds.len() && !x.rounds.is_empty()).then(|| ratios(&x.rounds, &y.rounds))
}

/// A goal's cell: the per-round ratios as median [min – max], and whether every round or only
/// the median round met `goal` (at most).
fn goal_cell(q: Option<Vec<f64>>, goal: f64) -> String {
    let Some(q) = q else { return "-".into() };
    let met = if max(&q) <= goal {
        " ✔ every round"
    } else if median(&q) <= goal {
        " ✔ median"
    } else {
        " ✘"
    };
    format!("{}{met}", spread(&q))
}

/// The goals the bus is held to, for each ringbus wiring, as per-round ratios (the systems
/// of a round ran back to back): against kanal's fan-out with tokio's budget (the fair
/// peer) and without it in the one-subscriber and many-publisher rows, the unbuffered row
/// against kanal-acked (the peer with its guarantee), against the best
/// lossless peer in the wide fan-outs, against the mpsc fan-out's subscribe.
fn goals(all: &[Row]) -> String {
    let find = |sc: &str, sys: &str| all.iter().find(|r| r.scenario == sc && r.system == sys);
    let wirings: Vec<&str> = std::iter::once("ringbus")
        .chain(WIRINGS.iter().copied())
        .filter(|w| all.iter().any(|r| r.system == *w))
        .collect();
    if find("publish/1", "ringbus").is_none() {
        return String::new();
    }
    let mut s = String::from(
        "## Against the goals\n\n\
         The goals of the contention work, for each of ringbus's subscriber wirings: \
         *ringbus* subscribes one-message handlers (`subscribe`; the goals are held to it), \
         *ringbus-batch* batch handlers (`subscribe_batch`), as the fan-outs' subscribers take \
         what is queued with their channel's batch receive. *kanal-fanout-budget* is kanal's \
         fan-out spending tokio's cooperative budget as ringbus must (guarantee 11: one unit \
         per send, one per up to 8 messages received); *kanal-fanout* spends none. The line \
         `publish_unbuffered` ≤ 1.0x kanal-acked holds that row also to the one peer whose \
         send, as ringbus's publish, waits for the handler. A ratio is \
         computed per round (its systems ran back to back) and shown as median [min – max]; \
         ✔ every round: the goal held in every round; ✔ median: in the median round only.\n\n",
    );
    let _ = writeln!(
        s,
        "| goal | {} |\n|---|{}",
        wirings.join(" | "),
        "---|".repeat(wirings.len())
    );
    let goals: [(&str, f64, &[&str]); 3] = [
        ("kanal-fanout-budget", 1.0, KANAL_ROWS),
        ("kanal-fanout", 1.5, KANAL_ROWS),
        // The unbuffered row against the one peer that gives its guarantee.
        ("kanal-acked", 1.0, &["publish_unbuffered"]),
    ];
    for (peer, goal, rows) in goals {
        if !all.iter().any(|r| r.system == peer) {
            continue;
        }
        for sc in rows {
            let cells: Vec<String> = wirings
                .iter()
                .map(|w| goal_cell(round_ratios(all, (sc, w), (sc, peer)), goal))
                .collect();
            let _ = writeln!(s, "| `{sc}` ≤ {goal:.1}x {peer} | {} |", cells.join(" | "));
        }
    }
    let best_peer = |sc: &str| {
        all.iter()
            .filter(|r| {
                r.scenario == sc
                    && r.system != "ringbus"
                    && !WIRINGS.contains(&r.system.as_str())
                    && !LOSSY.contains(&r.system.as_str())
            })
            .min_by(|a, b| a.median.total_cmp(&b.median))
    };
    for sc in ["publish/10", "publish/100"] {
        let Some(peer) = best_peer(sc) else { continue };
        let cells: Vec<String> = wirings
            .iter()
            .map(|w| goal_cell(round_ratios(all, (sc, w), (sc, &peer.system)), 0.2))
            .collect();
        let _ = writeln!(
            s,
            "| `{sc}` ≤ 0.2x the best lossless peer ({}) | {} |",
            peer.system,
            cells.join(" | ")
        );
    }
    if find("subscribe", "tokio-mpsc-fanout").is_some() {
        let cells: Vec<String> = wirings
            .iter()
            .map(|w| {
                let allocs = find("subscribe", w).map_or(f64::NAN, |r| r.allocs);
                format!(
                    "{}, {allocs:.1} allocs{}",
                    goal_cell(
                        round_ratios(all, ("subscribe", w), ("subscribe", "tokio-mpsc-fanout")),
                        1.0
                    ),
                    if allocs <= 2.0 { " ✔" } else { " ✘" }
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "| `subscribe` ≤ 1x the mpsc fan-out's pair, ≤ 2 allocations | {} |",
            cells.join(" | ")
        );
    }
    let cells: Vec<String> = wirings
        .iter()
        .map(|w| {
            let pair = round_ratios(all, ("publish/100", w), ("publish/1", w));
            goal_cell(pair, 10.0)
        })
        .collect();
    let _ = writeln!(
        s,
        "| `publish/100` ≤ 10x `publish/1` | {} |\n",
        cells.join(" | ")
    );
    s.push_str(&penalty(all));
    s
}

/// The many-publisher penalty of every system that ran both scenarios of a pair: the time
/// per publish with 16 publishers over the time with one, per round. It cancels the
/// machine's speed, so it carries across machines; the goal for ringbus's wirings is 1.3.
fn penalty(all: &[Row]) -> String {
    let mut systems: Vec<&str> = Vec::new();
    for r in all {
        if r.scenario == "publish_parallel" && !systems.contains(&r.system.as_str()) {
            systems.push(&r.system);
        }
    }
    if systems.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "### The many-publisher penalty\n\n\
         The time per publish with 16 publisher tasks over the time with one, the same \
         scenario otherwise, per round: median [min – max]. The machine's speed cancels out, \
         so this figure carries across machines. Goal: at most 1.3 for ringbus and \
         ringbus-batch.\n\n",
    );
    let heads: Vec<String> = PENALTY_PAIRS
        .iter()
        .map(|(par, one)| format!("`{par}` ÷ `{one}`"))
        .collect();
    let _ = writeln!(
        s,
        "| system | {} |\n|---|{}",
        heads.join(" | "),
        "---|".repeat(heads.len())
    );
    for system in systems {
        let ours = system == "ringbus" || WIRINGS.contains(&system);
        let cells: Vec<String> = PENALTY_PAIRS
            .iter()
            .map(|(par, one)| {
                let q = round_ratios(all, (par, system), (one, system));
                if ours {
                    goal_cell(q, 1.3)
                } else {
                    q.map_or("-".into(), |q| spread(&q))
                }
            })
            .collect();
        let _ = writeln!(s, "| {system} | {} |", cells.join(" | "));
    }
    s.push('\n');
    s
}

fn conclusions(all: &[Row]) -> String {
    let mut s = String::from("## What these numbers do and do not allow one to conclude\n\n");
    // The noise of this run: the same configuration measured twice.
    let get = |sc: &str, sys: &str| {
        all.iter()
            .find(|r| r.scenario == sc && r.system == sys)
            .map(|r| r.median)
    };
    let twins_of = ["ring/publish", "ring/publish_readers/1", "ring/stages/1"];
    let mut twins = Vec::new();
    let mut widest: f64 = 1.0;
    for sys in SYSTEMS.iter().map(|(s, _)| *s) {
        let m: Vec<f64> = twins_of.iter().filter_map(|sc| get(sc, sys)).collect();
        if m.len() >= 2 {
            let (lo, hi) = (min(&m), max(&m));
            widest = widest.max(hi / lo);
            twins.push(format!("{sys} {} to {}", fmt_ns(lo), fmt_ns(hi)));
        }
    }
    if !twins.is_empty() {
        let verdict = if widest < 1.5 {
            format!(
                "In this run they agree within {:.0}% (the widest gap, between scenarios run \
                 minutes apart): differences between systems well beyond that are not noise \
                 of this run.",
                100.0 * (widest - 1.0)
            )
        } else {
            format!(
                "In this run they differ by up to {widest:.1}x: the machine changed state \
                 during the run (cross-core figures on this VM are bimodal, most likely as \
                 the hypervisor moves the two vCPUs between sibling hyperthreads of one host \
                 core and separate cores). Differences of that order between figures of \
                 different scenarios mean nothing here."
            )
        };
        let _ = writeln!(
            s,
            "- **How far to trust a difference within this run.** `ring/publish`, \
             `ring/publish_readers/1` and (for the ring, the disruptor and the channels) \
             `ring/stages/1` are the same configuration, one writer and one reader thread, \
             measured at different times of the run. Their medians: {}. {verdict} Ratios whose \
             rounds straddle 1 (not bold) mean nothing either way.",
            twins.join("; ")
        );
    }
    s.push_str(
        "- **How far to trust a difference between runs: less.** While this runner was being \
         built, runs of the same binary minutes apart on this VM put whole scenarios in \
         different states for minutes at a time, moving some systems by up to 4x and others \
         not at all, so that a ratio could flip between runs (`publish/100`, ringbus against \
         `async-broadcast` and `kanal-fanout`, did). Rounds spread over the run guard against \
         states shorter than the run, not longer ones: one run, however stable inside, is one \
         sample of the machine. Before building on a ratio near 1, or on one scenario alone, \
         run `just bench` again.\n",
    );
    s.push_str(
        "- **Allowed:** comparing systems *within a scenario of this run*, through the \
         ratio column: all systems of a round ran back to back under the same conditions. A \
         ratio whose min and max lie on the same side of 1 (shown in bold) held in every \
         round; the per-family lists above name them.\n\
         - **Allowed:** the allocation counts. They do not depend on timing as much as the \
         times do (they still can, a little, where a system allocates only when it has to \
         wait), and 0 means no allocation at all in the timed window.\n\
         - **Not allowed:** reading the absolute times as what another machine will show. \
         This is a 2-vCPU virtual machine shared with other work; the publisher, the \
         subscribers, the runtime's workers and (for the disruptor) busy-spinning consumers \
         share two cores, so scheduling decides much of every figure. Absolute times have \
         moved 2x between runs of the same binary here; ratios move less, not never.\n\
         - **Not allowed:** reading `tokio-broadcast` as a faster bus. It never waits for a \
         subscriber: where it is cheapest it also lost deliveries (the *lost* column), and its \
         figure is the publisher's cost alone, not a delivery rate. The backpressured \
         systems, by contrast, can never run more than a queue ahead of their slowest \
         subscriber, so their figure is also the sustained throughput of the whole \
         pipeline.\n\
         - **Not allowed:** reading `subscribe_receiver` as like for like: the peers' rows \
         there spawn nothing (the *tasks per subscription* column), ringbus's spawns its \
         handler's task. `subscribe` is the like-for-like row.\n\
         - **Not allowed:** reading `publish_unbuffered` as like for like against any peer \
         but `kanal-acked` (different promises, see Method), or the disruptor's figures with more than one consumer as the \
         crate's best (it wants a core per consumer).\n\
         - **Not allowed:** reading `kanal-fanout`'s lead as cheaper delivery alone. kanal's \
         `send` and `recv` spend no tokio cooperative budget; ringbus's publishes and \
         subscribers do (guarantee 11), as tokio's own channels do. Without its budget \
         ringbus ran up to twice as fast in the many-publisher rows, and still behind kanal: \
         see [the bus notes](../notes/bus-2026-12.md), \"what guarantee 11 costs\".\n\
         - **Not covered:** latency under load (see the latency table and `latency.md`), \
         machines with more cores (where readers and writers stop time-sharing), message \
         types other than `u64`, and the cost of the handlers themselves (they only count).\n",
    );
    s
}
