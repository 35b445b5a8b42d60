//! Where a benchmark's figures go besides its printout: one JSON line per measured row, appended
//! to the file `SKILLGATE_BENCH_RESULTS` names (`scripts/bench` sets it and gathers the lines
//! into `bench/results.json`, from which the README's performance tables are generated).

use std::io::Write;

use serde_json::{Value, json};

/// Records row `row` of benchmark `bench` with its `figures` (an object of numbers, in the units
/// their names say: `_ms`, `_us`, `_per_s`, `_mib`, ...). Without `SKILLGATE_BENCH_RESULTS`
/// it does nothing; a file that cannot be written is a failed benchmark run.
pub fn record(bench: &str, row: &str, figures: Value) {
    let Ok(path) = std::env::var("SKILLGATE_BENCH_RESULTS") else {
        return;
    };
    assert!(figures.is_object(), "{bench}/{row}: figures are an object");
    let line = json!({ "bench": bench, "row": row, "figures": figures });
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    writeln!(file, "{line}").unwrap_or_else(|e| panic!("{path}: {e}"));
}
