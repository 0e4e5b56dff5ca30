//! Table files: one row per line, `key=value` pairs, `#` comments. What the tuner writes and
//! the host reads from `PURLIN_TUNING=path`.
//!
//! ```text
//! # arch world collective max_bytes blocks threads put_blocks chunk_bytes latency_threshold two_shot_min_bytes two_shot_min_world algorithm
//! arch=90 world=8 collective=all_reduce max_bytes=65536 blocks=8 threads=256 put_blocks=4 chunk_bytes=524288 latency_threshold=131072 two_shot_min_bytes=65536 two_shot_min_world=4 algorithm=auto
//! ```

use super::{Algorithm, CollectiveKind, Plan, Row, Table};
use std::fmt::Write as _;
use std::string::{String, ToString};
use std::vec::Vec;

/// A table file line that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What was wrong.
    pub reason: String,
}

impl core::fmt::Display for ParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "tuning table line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for ParseError {}

/// Writes rows in the file format.
///
/// ```
/// use purlin_tuning::{Table, write_rows};
/// let text = write_rows(Table::builtin().rows());
/// let rows = Table::parse(&text).unwrap();
/// assert_eq!(rows.as_slice(), Table::builtin().rows());
/// ```
pub fn write_rows(rows: &[Row]) -> String {
    let mut out = String::from(
        "# purlin-tuning table: one band per line; max_bytes is the dispatch size bound (inclusive)\n",
    );
    for r in rows {
        let p = &r.plan;
        let max = if r.max_bytes == u64::MAX {
            "any".to_string()
        } else {
            r.max_bytes.to_string()
        };
        let _ = writeln!(
            out,
            "arch={} world={} collective={} max_bytes={} blocks={} threads={} put_blocks={} chunk_bytes={} latency_threshold={} two_shot_min_bytes={} two_shot_min_world={} algorithm={}",
            r.arch,
            r.world,
            r.collective.name(),
            max,
            r.blocks,
            p.threads,
            p.put_blocks,
            p.chunk_bytes,
            p.latency_threshold,
            p.two_shot_min_bytes,
            p.two_shot_min_world,
            Algorithm::of(p).name(),
        );
    }
    out
}

impl Table<'_> {
    /// Reads a table file (see the module docs); every key is required.
    pub fn parse(text: &str) -> Result<Vec<Row>, ParseError> {
        let mut rows = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |reason: String| ParseError {
                line: i + 1,
                reason,
            };
            let get = |key: &str| -> Result<&str, ParseError> {
                line.split_whitespace()
                    .filter_map(|kv| kv.split_once('='))
                    .find(|(k, _)| *k == key)
                    .map(|(_, v)| v)
                    .ok_or_else(|| err(std::format!("missing {key}")))
            };
            let num = |key: &str| -> Result<u64, ParseError> {
                let v = get(key)?;
                if v == "any" {
                    return Ok(u64::MAX);
                }
                v.parse()
                    .map_err(|_| err(std::format!("{key}={v} is not a number")))
            };
            let collective = get("collective")?;
            let collective = CollectiveKind::ALL
                .into_iter()
                .find(|c| c.name() == collective)
                .ok_or_else(|| err(std::format!("unknown collective {collective}")))?;
            let algorithm = get("algorithm")?;
            let algorithm = Algorithm::ALL
                .into_iter()
                .find(|a| a.name() == algorithm)
                .ok_or_else(|| err(std::format!("unknown algorithm {algorithm}")))?;
            // Narrow fields refuse values they cannot hold rather than wrap ("any" only means
            // "no bound" for max_bytes).
            let narrow = |key: &str| -> Result<u32, ParseError> {
                let v = num(key)?;
                u32::try_from(v).map_err(|_| {
                    err(std::format!(
                        "{key}={} does not fit 32 bits",
                        get(key).unwrap_or("?")
                    ))
                })
            };
            let blocks = narrow("blocks")?;
            if blocks == 0 || blocks as usize > purlin_device::context::MAX_BLOCKS {
                return Err(err(std::format!(
                    "blocks={blocks} is not in 1..={}",
                    purlin_device::context::MAX_BLOCKS
                )));
            }
            rows.push(Row {
                arch: narrow("arch")?,
                world: narrow("world")?,
                collective,
                max_bytes: num("max_bytes")?,
                blocks,
                plan: Plan {
                    threads: narrow("threads")?,
                    put_blocks: narrow("put_blocks")?,
                    chunk_bytes: num("chunk_bytes")?,
                    latency_threshold: num("latency_threshold")?,
                    two_shot_min_bytes: num("two_shot_min_bytes")?,
                    two_shot_min_world: narrow("two_shot_min_world")?,
                    algorithm: algorithm as u32,
                    ..Plan::DEFAULT
                },
            });
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_line() {
        let e = Table::parse("# header\narch=90 world=2").unwrap_err();
        assert_eq!(e.line, 2);
        let e =
            Table::parse(&write_rows(Table::builtin().rows()).replace("blocks=8 ", "blocks=0 "))
                .unwrap_err();
        assert!(e.reason.contains("blocks=0"));
    }
}

#[cfg(test)]
mod narrow_tests {
    use super::*;

    /// Numbers too large for their field are errors, not truncated (blocks=2^32+8 once parsed
    /// as 8).
    #[test]
    fn numbers_that_do_not_fit_their_field_are_refused() {
        let row = "arch=90 world=8 collective=all_reduce max_bytes=any blocks=8 threads=256 put_blocks=2 chunk_bytes=65536 latency_threshold=0 two_shot_min_bytes=0 two_shot_min_world=4 algorithm=auto";
        assert!(Table::parse(row).is_ok());
        for (key, value) in [
            ("blocks=8", "blocks=4294967304"),
            ("threads=256", "threads=4294967552"),
            ("put_blocks=2", "put_blocks=any"),
            ("world=8", "world=-1"),
        ] {
            let bad = row.replace(key, value);
            assert!(Table::parse(&bad).is_err(), "{bad}");
        }
    }
}
