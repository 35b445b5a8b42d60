//! The README's performance blocks as `bench/results.json` gives them: one renderer per block,
//! the figures formatted one way everywhere, each target beside the figure it judges.

use serde_json::{Map, Value};

/// `bench/results.json`: the machine, and per benchmark when and at which commit it was run and
/// its rows (`{"row": label, ...figures}`), in the order the benchmark measured them.
pub struct Results(pub Value);

type Row = Map<String, Value>;

impl Results {
    fn bench(&self, id: &str) -> Option<&Value> {
        self.0["benches"].get(id)
    }

    fn rows(&self, id: &str) -> Vec<(&str, &Row)> {
        let Some(rows) = self.bench(id).and_then(|b| b["rows"].as_array()) else {
            return Vec::new();
        };
        rows.iter()
            .filter_map(|r| Some((r["row"].as_str()?, r.as_object()?)))
            .collect()
    }

    fn row(&self, id: &str, label: &str) -> Option<&Row> {
        self.rows(id)
            .into_iter()
            .find(|(l, _)| *l == label)
            .map(|(_, r)| r)
    }

    /// Benchmark `id`'s table with the line under it: when, where, how, by which command; or
    /// how to get its figures.
    fn block(&self, id: &str, header: &[&str], rows: Vec<Vec<String>>) -> String {
        // Built as the shipped binary is (`scripts/bench --dist`), or with the bench profile.
        let profile = match self.bench(id).and_then(|b| b["profile"].as_str()) {
            Some(profile) => format!("--profile {profile} "),
            None => String::new(),
        };
        let command = match id {
            "binary" => "cargo build --profile dist".to_string(),
            bench => format!("cargo bench {profile}--bench {bench}"),
        };
        let provenance = match self.bench(id) {
            Some(b) => format!(
                "_`{command}`, {} mode, on {}, at commit `{}` on {}._\n",
                b["mode"].as_str().unwrap_or("?"),
                b["cpu"].as_str().unwrap_or("an unrecorded CPU"),
                b["commit"].as_str().unwrap_or("?"),
                b["date"].as_str().unwrap_or("?"),
            ),
            None => format!("_Not measured yet: `scripts/bench {id}`._\n"),
        };
        table(header, rows) + "\n" + &provenance
    }
}

fn num(row: Option<&Row>, key: &str) -> Option<f64> {
    row?.get(key)?.as_f64()
}

/// A whole number with thousands separated by commas.
fn int(x: f64) -> String {
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 { format!("-{out}") } else { out }
}

fn rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else {
        int(x)
    }
}

fn ms(x: f64) -> String {
    format!("{x:.2} ms")
}

fn us(x: f64) -> String {
    if x >= 1000.0 {
        ms(x / 1000.0)
    } else if x >= 100.0 {
        format!("{x:.0} µs")
    } else {
        format!("{x:.2} µs")
    }
}

fn ratio(x: f64) -> String {
    format!("{x:.2}x")
}

fn pct(x: f64) -> String {
    format!("{:.0}%", 100.0 * x)
}

/// A figure, or a dash where the row or the figure was not measured.
fn or_dash(x: Option<f64>, f: fn(f64) -> String) -> String {
    x.map_or_else(|| "-".to_string(), f)
}

/// A target and whether the figure meets it: `≤ 0.3 µs: met`.
fn judged(target: &str, met: Option<bool>) -> String {
    match met {
        Some(true) => format!("{target}: met"),
        Some(false) => format!("{target}: **missed**"),
        None => target.to_string(),
    }
}

fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut out = format!(
        "| {} |\n|{}\n",
        header.join(" | "),
        "---|".repeat(header.len())
    );
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

/// Renders one block from the results.
pub type Render = fn(&Results) -> String;

/// Every generated block of the README, by its marker name, in the README's order.
pub const BLOCKS: &[(&str, Render)] = &[
    ("machine", machine),
    ("http", http),
    ("kernel", kernel),
    ("sandbox", sandbox),
    ("bus", bus),
    ("ws", ws),
    ("slack", slack),
    ("email", email),
    ("webhook", webhook),
    ("agent", agent),
    ("binary", binary),
    ("soak", soak),
    ("hostile", hostile),
];

fn machine(r: &Results) -> String {
    let m = &r.0["machine"];
    format!(
        "Release builds, measured by `scripts/bench`; last run on {} ({} cores, {} GiB; shared, \
         so figures move by about a tenth from run to run) on {} at commit `{}`. Each block \
         names the processor it ran on: compare figures measured on the same one. A block whose \
         command says `--profile dist` was built as the shipped binary is (`scripts/bench \
         --dist`: link-time optimisation, one codegen unit, dependencies off the request path \
         optimised for size).\n",
        m["cpu"].as_str().unwrap_or("an unknown CPU"),
        m["cores"].as_u64().unwrap_or(0),
        m["memory_gib"].as_u64().unwrap_or(0),
        r.0["date"].as_str().unwrap_or("?"),
        r.0["commit"].as_str().unwrap_or("?"),
    )
}

fn http(r: &Results) -> String {
    let rows = r
        .rows("http")
        .into_iter()
        .map(|(label, row)| {
            let gateway = label != "bare axum handler";
            let share = num(Some(row), "of_bare_req_per_s");
            let p99 = num(Some(row), "p99_of_bare");
            vec![
                label.to_string(),
                or_dash(num(Some(row), "req_per_s"), rate),
                if gateway {
                    judged(&or_dash(share, pct), share.map(|s| s >= 0.75))
                } else {
                    "100%".into()
                },
                or_dash(num(Some(row), "p50_ms"), ms),
                or_dash(num(Some(row), "p99_ms"), ms),
                if gateway {
                    judged(&or_dash(p99, ratio), p99.map(|p| p <= 1.2))
                } else {
                    "1x".into()
                },
            ]
        })
        .collect();
    r.block(
        "http",
        &[
            "server",
            "req/s at saturation",
            "of bare (target ≥ 75%)",
            "p50 at half load",
            "p99 at half load",
            "p99 of bare (target ≤ 1.2x)",
        ],
        rows,
    )
}

fn kernel(r: &Results) -> String {
    let at = |name: &str| num(r.row("invoke", name), "us");
    let layers = |kind: &str| {
        let times: Vec<Option<f64>> = [1, 10, 100]
            .iter()
            .map(|n| at(&format!("per_layer/{kind}/{n}")))
            .collect();
        let slope = match (times[0], times[2]) {
            (Some(one), Some(hundred)) => Some((hundred - one) / 99.0),
            _ => None,
        };
        let listed: Vec<String> = times
            .iter()
            .map(|t| t.map_or("-".into(), |t| format!("{t:.1}")))
            .collect();
        (format!("{} µs", listed.join(" / ")), slope)
    };
    let (leaf, leaf_slope) = layers("leaf");
    let (inheriting, inheriting_slope) = layers("inheriting");
    r.block("invoke", &["benchmark", "time", "a layer", "target"], vec![
            vec![
                "`invoke_noop`".into(),
                or_dash(at("invoke_noop"), us),
                "".into(),
                "".into(),
            ],
            vec![
                "`per_layer/leaf/{1,10,100}` (extra no-op middleware with `$inherit: false`)"
                    .into(),
                leaf,
                or_dash(leaf_slope, us),
                judged("≤ 0.3 µs a layer", leaf_slope.map(|s| s <= 0.3)),
            ],
            vec![
                "`per_layer/inheriting/{1,10,100}` (extra middleware that inherit the default pipeline)".into(),
                inheriting,
                or_dash(inheriting_slope, us),
                "".into(),
            ],
        ])
}

fn sandbox(r: &Results) -> String {
    let labels = [
        (
            "latency/bench-js/one_at_a_time",
            "`.skill.js`, one call at a time",
        ),
        (
            "latency/run-code/one_at_a_time",
            "untrusted code (`run_untrusted`, anonymous skill, its cascade resolved per call), one at a time",
        ),
        (
            "latency/bench-js/100_at_once",
            "`.skill.js`, 100 calls started at once: each call's latency",
        ),
        (
            "throughput/bench-js/100_at_once_per_call",
            "`.skill.js`, 100 at once: batch time / 100",
        ),
    ];
    let rows = labels
        .iter()
        .map(|(key, label)| {
            let row = r.row("sandbox", key);
            let p50 = num(row, "p50_us");
            vec![
                label.to_string(),
                or_dash(p50, us),
                or_dash(num(row, "p99_us"), us),
                if key.ends_with("bench-js/one_at_a_time") {
                    judged("p50 ≤ 150 µs", p50.map(|p| p <= 150.0))
                } else {
                    String::new()
                },
            ]
        })
        .collect();
    r.block("sandbox", &["benchmark", "p50", "p99", "target"], rows)
}

/// The rows of the tables of rows that a target judges, by benchmark and label: each must be
/// among the results, so a renamed row cannot drop its target from the README unseen.
pub const JUDGED_ROWS: &[(&str, &str)] = &[
    (
        "bus",
        "postgres: 8 producers, 16 consumers, acks one by one",
    ),
    (
        "bus",
        "postgres: steady 1000/s, 1 consumer, acks one by one",
    ),
    ("bus", "postgres: drain a backlog, 16 consumers"),
    ("bus", "postgres: enqueue, batches of 100"),
    ("email", "postgres: pipelined, 16 clients"),
    ("webhook", "postgres"),
    ("slack", "postgres: steady 500/s"),
];

impl Results {
    /// Whether benchmark `id` was measured, and its row `label` if so.
    pub fn judged_row(&self, id: &str, label: &str) -> Option<Option<String>> {
        self.bench(id)?;
        Some(self.row(id, label).map(|row| target(id, label, row)))
    }
}

/// The target a row of a table of rows is judged by (the performance issue's), if it has one.
fn target(id: &str, label: &str, row: &Row) -> String {
    let at_least = |key: &str, floor: f64| num(Some(row), key).map(|x| x >= floor);
    let at_most = |key: &str, ceiling: f64| num(Some(row), key).map(|x| x <= ceiling);
    let both = |a: Option<bool>, b: Option<bool>| Some(a? && b?);
    match (id, label) {
        ("bus", "postgres: 8 producers, 16 consumers, acks one by one") => {
            judged("≥ 6,000/s", at_least("events_per_s", 6000.0))
        }
        ("bus", "postgres: steady 1000/s, 1 consumer, acks one by one") => {
            judged("p99 ≤ 5 ms", at_most("p99_ms", 5.0))
        }
        ("bus", "postgres: drain a backlog, 16 consumers") => {
            judged("≥ 71,000/s", at_least("events_per_s", 71_000.0))
        }
        ("bus", "postgres: enqueue, batches of 100") => {
            judged("≥ 75,600/s", at_least("events_per_s", 75_600.0))
        }
        ("email", "postgres: pipelined, 16 clients") => {
            judged("≥ 1,000/s", at_least("mails_per_s", 1000.0))
        }
        ("webhook", "postgres") => judged(
            "≥ 3,000/s, p99 ≤ 15 ms",
            both(
                at_least("deliveries_per_s", 3000.0),
                at_most("p99_ms", 15.0),
            ),
        ),
        ("slack", "postgres: steady 500/s") => judged("p99 ≤ 50 ms", at_most("p99_ms", 50.0)),
        _ => String::new(),
    }
}

fn split_row(label: &str) -> (&str, &str) {
    label.split_once(": ").unwrap_or((label, ""))
}

fn bus(r: &Results) -> String {
    let rows = r
        .rows("bus")
        .into_iter()
        .map(|(label, row)| {
            let (store, phase) = split_row(label);
            vec![
                store.to_string(),
                phase.to_string(),
                or_dash(num(Some(row), "events_per_s"), rate),
                num(Some(row), "p50_ms").map_or(String::new(), ms),
                num(Some(row), "p99_ms").map_or(String::new(), ms),
                target("bus", label, row),
            ]
        })
        .collect();
    r.block(
        "bus",
        &["store", "phase", "events/s", "p50", "p99", "target"],
        rows,
    )
}

fn ws(r: &Results) -> String {
    let mut rows = Vec::new();
    if let Some(row) = r.row("ws", "saturation") {
        rows.push(vec![
            format!(
                "fan-out, {} subscribers, saturation",
                int(num(Some(row), "subscribers").unwrap_or(0.0))
            ),
            format!(
                "{} messages/s delivered",
                or_dash(num(Some(row), "messages_per_s"), rate)
            ),
        ]);
    }
    for label in ["at 50k messages/s", "at half saturation"] {
        if let Some(row) = r.row("ws", label) {
            rows.push(vec![
                format!(
                    "publish → client, {} messages/s",
                    or_dash(num(Some(row), "messages_per_s"), rate)
                ),
                format!(
                    "p50 {}, p99 {}",
                    or_dash(num(Some(row), "p50_ms"), ms),
                    or_dash(num(Some(row), "p99_ms"), ms)
                ),
            ]);
        }
    }
    if let Some(row) = r.row("ws", "idle sockets") {
        let kib = num(Some(row), "kib_per_socket");
        rows.push(vec![
            format!(
                "server memory per idle authenticated socket ({} sockets)",
                int(num(Some(row), "sockets").unwrap_or(0.0))
            ),
            judged(
                &or_dash(kib, |k| format!("{k:.1} KiB")),
                kib.map(|k| k <= 12.0),
            ) + " (target ≤ 12 KiB)",
        ]);
    }
    r.block("ws", &["measure", "figure"], rows)
}

/// A table of every recorded row: the store and what was measured from its label, then figures.
fn per_store(r: &Results, id: &str, rate_key: &str, rate_header: &str) -> String {
    let rows = r
        .rows(id)
        .into_iter()
        .map(|(label, row)| {
            let (store, load) = split_row(label);
            let load = match num(Some(row), "clients") {
                Some(clients) if load.is_empty() => format!("{} clients", int(clients)),
                _ => load.to_string(),
            };
            vec![
                store.to_string(),
                load,
                or_dash(num(Some(row), rate_key), rate),
                or_dash(num(Some(row), "p50_ms"), ms),
                or_dash(num(Some(row), "p99_ms"), ms),
                target(id, label, row),
            ]
        })
        .collect();
    r.block(
        id,
        &["store", "load", rate_header, "p50", "p99", "target"],
        rows,
    )
}

fn slack(r: &Results) -> String {
    per_store(r, "slack", "events_per_s", "events/s")
}

fn email(r: &Results) -> String {
    per_store(r, "email", "mails_per_s", "mails/s")
}

fn webhook(r: &Results) -> String {
    per_store(r, "webhook", "deliveries_per_s", "deliveries/s")
}

fn agent(r: &Results) -> String {
    let one = r.row("agent", "one run at a time");
    let many = r.row("agent", "runs at once");
    let a_turn = num(one, "ms_a_turn");
    r.block(
        "agent",
        &["benchmark", "figure", "target"],
        vec![
            vec![
                "one run at a time".into(),
                format!(
                    "{} a turn ({} turns/s)",
                    or_dash(a_turn, ms),
                    or_dash(num(one, "turns_per_s"), rate)
                ),
                judged("≤ 1 ms a turn", a_turn.map(|t| t <= 1.0)),
            ],
            vec![
                format!("{} runs at once", int(num(many, "runs").unwrap_or(0.0))),
                format!(
                    "{} turns/s; peak RSS {} ({} before)",
                    or_dash(num(many, "turns_per_s"), rate),
                    or_dash(num(many, "peak_rss_mib"), |m| format!("{m:.0} MiB")),
                    or_dash(num(many, "rss_before_mib"), |m| format!("{m:.0} MiB")),
                ),
                String::new(),
            ],
        ],
    )
}

fn binary(r: &Results) -> String {
    let row = r.row("binary", "dist");
    let size = num(row, "size_mb");
    let rss = num(row, "idle_rss_mib");
    let image = num(r.row("binary", "image"), "size_mb");
    r.block(
        "binary",
        &["measure", "figure", "target"],
        vec![
            vec![
                "`target/dist/skillgate` (stripped, all three model providers)".into(),
                or_dash(size, |s| format!("{s:.1} MB")),
                judged("≤ 25 MB", size.map(|s| s <= 25.0)),
            ],
            vec![
                "idle RSS of `skillgate serve` (SQLite, the project's skills)".into(),
                or_dash(rss, |m| format!("{m:.1} MiB")),
                judged("≤ 25 MiB", rss.map(|m| m <= 25.0)),
            ],
            vec![
                "container image (`scripts/test-deploy` around that binary)".into(),
                or_dash(image, |s| format!("{s:.0} MB")),
                String::new(),
            ],
        ],
    )
}

fn soak(r: &Results) -> String {
    let rows = r
        .rows("soak")
        .into_iter()
        .map(|(store, row)| {
            let list = |key: &str, f: fn(f64) -> String| {
                row.get(key)
                    .and_then(Value::as_array)
                    .map(|v| {
                        v.iter()
                            .filter_map(Value::as_f64)
                            .map(f)
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_else(|| "-".into())
            };
            vec![
                store.to_string(),
                or_dash(num(Some(row), "max_req_per_s"), rate),
                format!(
                    "{} for {} s",
                    or_dash(num(Some(row), "req_per_s"), rate),
                    int(num(Some(row), "secs").unwrap_or(0.0))
                ),
                or_dash(num(Some(row), "answered"), int),
                judged(
                    &or_dash(num(Some(row), "failed"), int),
                    num(Some(row), "failed").map(|f| f == 0.0),
                ),
                format!(
                    "{} → {} ({})",
                    list("rss_after_warmup_mib", |m| format!("{m:.1} MiB")),
                    list("rss_at_end_mib", |m| format!("{m:.1} MiB")),
                    list("rss_growth_pct", |g| format!("{g:+.1}%")),
                ),
            ]
        })
        .collect();
    r.block(
        "soak",
        &[
            "store",
            "max req/s",
            "paced at",
            "answered",
            "failed (target 0)",
            "RSS after warm-up → at the end (growth, target ≤ +5%)",
        ],
        rows,
    )
}

fn hostile(r: &Results) -> String {
    fn describe(kind: &str) -> &str {
        match kind {
            "slowloris" => "slowloris (headers never end)",
            "smtp-idle" => "idle SMTP sessions (reconnecting after 421)",
            "smtp-data" => "SMTP DATA floods",
            "ws-unread" => "WebSocket clients that never read (100 KB invocations)",
            "fan-out" => {
                "fan-out callers (100,000 invocations asked, the run budget stops each at 10,000)"
            }
            "sse-unread" => "unread streams of a chatty skill (2,000 events of 2 KB a run)",
            "body-dribble" => "request bodies of 1 MB sent but for their last 100 bytes",
            "all" => "all at once",
            other => other,
        }
    }
    let rows = r
        .rows("hostile")
        .into_iter()
        .map(|(kind, row)| {
            let times = num(Some(row), "p99_of_unloaded");
            let peak = num(Some(row), "peak_rss_mb");
            vec![
                format!(
                    "{} (x{})",
                    describe(kind),
                    int(num(Some(row), "connections").unwrap_or(0.0))
                ),
                judged(&or_dash(times, ratio), times.map(|t| t <= 2.0)),
                or_dash(num(Some(row), "unloaded_p99_ms"), ms),
                judged(
                    &or_dash(peak, |p| format!("{p:.0} MB")),
                    peak.map(|p| p <= 300.0),
                ),
                or_dash(num(Some(row), "failed"), int),
            ]
        })
        .collect();
    r.block(
        "hostile",
        &[
            "hostile kind",
            "normal client's p99 vs unloaded (target ≤ 2x)",
            "unloaded p99",
            "server peak RSS (target ≤ 300 MB)",
            "normal requests failed",
        ],
        rows,
    )
}
