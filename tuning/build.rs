//! Generates the compiled-in sm_90 rows from the table the tuner wrote on the H200
//! (`tables/sm90-h200.table`, `purlin-tune`'s file format), so the built-in table is that file
//! and cannot drift from it. The V forms get their fixed-size counterpart's largest band (the
//! tuner does not sweep them yet).

use std::fmt::Write as _;

const TABLE: &str = "tables/sm90-h200.table";

/// `all_to_all_v` → `AllToAllV`: a table name as its Rust variant.
fn variant(name: &str) -> String {
    name.split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next().map_or(String::new(), |f| {
                f.to_ascii_uppercase().to_string() + c.as_str()
            })
        })
        .collect()
}

/// One line's `key=value` fields.
fn fields(line: &str) -> Vec<(&str, &str)> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect()
}

fn row(f: &[(&str, &str)], collective: &str, line: usize) -> String {
    let get = |key: &str| {
        f.iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("{TABLE}:{line}: missing {key}"))
    };
    let num = |key: &str| match get(key) {
        "any" => "u64::MAX".to_string(),
        v => {
            v.parse::<u64>()
                .unwrap_or_else(|_| panic!("{TABLE}:{line}: {key}={v} is not a number"));
            v.to_string()
        }
    };
    format!(
        "    Row {{ arch: {arch}, world: {world}, collective: CollectiveKind::{collective}, \
         max_bytes: {max_bytes}, blocks: {blocks}, plan: Plan {{ threads: {threads}, \
         put_blocks: {put}, chunk_bytes: {chunk}, latency_threshold: {threshold}, \
         two_shot_min_bytes: {two_shot}, two_shot_min_world: {two_shot_world}, \
         algorithm: Algorithm::{algorithm} as u32, mode: ReductionMode::Default as u32, \
         trace: 0, launch_dependents: 0 }} }},\n",
        arch = num("arch"),
        world = num("world"),
        collective = variant(collective),
        max_bytes = num("max_bytes"),
        blocks = num("blocks"),
        threads = num("threads"),
        put = num("put_blocks"),
        chunk = num("chunk_bytes"),
        threshold = num("latency_threshold"),
        two_shot = num("two_shot_min_bytes"),
        two_shot_world = num("two_shot_min_world"),
        algorithm = variant(get("algorithm")),
    )
}

fn main() {
    println!("cargo:rerun-if-changed={TABLE}");
    let text = std::fs::read_to_string(TABLE).unwrap_or_else(|e| panic!("{TABLE}: {e}"));
    let (mut rows, mut v_rows) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate() {
        let line_text = line.split('#').next().unwrap_or("").trim();
        if line_text.is_empty() {
            continue;
        }
        let f = fields(line_text);
        let collective = f
            .iter()
            .find(|(k, _)| *k == "collective")
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("{TABLE}:{}: missing collective", i + 1));
        rows.push(row(&f, collective, i + 1));
        let largest = f.iter().any(|&(k, v)| k == "max_bytes" && v == "any");
        if largest && matches!(collective, "all_gather" | "reduce_scatter" | "all_to_all") {
            v_rows.push(row(&f, &format!("{collective}_v"), i + 1));
        }
    }
    rows.extend(v_rows);
    let mut out = String::new();
    writeln!(
        out,
        "/// Every sm_90 row, generated from `{TABLE}` by the build script."
    )
    .unwrap();
    writeln!(out, "pub(crate) const ROWS: [Row; {}] = [", rows.len()).unwrap();
    rows.iter().for_each(|r| out.push_str(r));
    out.push_str("];\n");
    let dir = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    std::fs::write(format!("{dir}/sm90_rows.rs"), out).expect("write the generated rows");
}
