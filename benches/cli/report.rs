//! What a benchmark row says and how it is printed: nccl-tests columns (size, count, type,
//! redop, time, algbw, busbw, #wrong) plus the roofline fraction, as a table or CSV.

use purlin::DataType;

pub use purlin::collective::CollectiveKind;

/// The collective a command line names: its short name (`ar`, `a2av`, ...) or its name
/// (`all_reduce`), as the collectives' list gives them.
///
/// ```
/// use purlin_bench::report::{CollectiveKind, parse_collective};
/// assert_eq!(parse_collective("a2av"), Ok(CollectiveKind::AllToAllV));
/// assert_eq!(parse_collective("all_gather"), Ok(CollectiveKind::AllGather));
/// assert!(parse_collective("bcast").is_err());
/// ```
pub fn parse_collective(s: &str) -> Result<CollectiveKind, String> {
    CollectiveKind::ALL
        .into_iter()
        .find(|c| c.short_name() == s || c.name() == s)
        .ok_or_else(|| {
            let known: Vec<&str> = CollectiveKind::ALL.iter().map(|c| c.short_name()).collect();
            format!("unknown collective {s} (one of {})", known.join(", "))
        })
}

/// Bus bandwidth factor (nccl-tests): AllReduce 2(n-1)/n, the others (n-1)/n.
pub fn bus_factor(c: CollectiveKind, world: u32) -> f64 {
    let n = world as f64;
    match c {
        CollectiveKind::AllReduce => 2.0 * (n - 1.0) / n,
        _ => (n - 1.0) / n,
    }
}

/// Fewest bytes the collective must move through memory, summed over `world` ranks, for a
/// row of `total_bytes` (nccl-tests' size: the output for AllGather, each rank's input
/// otherwise): every input read once and every output written once. On the virtual node all
/// ranks share one GPU's memory, so this over the time, against a device-to-device copy's
/// bandwidth (bytes read + written per second), is how close the collective is to the limit.
pub fn min_memory_bytes(c: CollectiveKind, world: u32, total_bytes: u64) -> f64 {
    let (n, b) = (world as f64, total_bytes as f64);
    match c {
        // in = out = b per rank
        CollectiveKind::AllReduce => 2.0 * n * b,
        // in = b/n, out = b per rank
        CollectiveKind::AllGather | CollectiveKind::AllGatherV => n * (b / n) + n * b,
        // in = b, out = b/n per rank
        CollectiveKind::ReduceScatter | CollectiveKind::ReduceScatterV => n * b + n * (b / n),
        // in = out = b per rank
        CollectiveKind::AllToAll => 2.0 * n * b,
        // The skewed counts of `run::v_counts` send b/n per rank on average (so that every
        // rank's receives fit its b-byte buffer): in = out = b in all.
        CollectiveKind::AllToAllV => 2.0 * b,
    }
}

/// One measured size.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// nccl-tests size: AllGather's output, each rank's input otherwise (bytes).
    pub total_bytes: u64,
    /// Elements in `total_bytes`.
    pub count: u64,
    /// Element type.
    pub dtype: DataType,
    /// Operator name (`-` for copies).
    pub redop: &'static str,
    /// Time per collective, µs (the slowest rank).
    pub time_us: f64,
    /// Wrong elements found by `--check`, summed over ranks (`None`: not checked).
    pub wrong: Option<u64>,
    /// Elements `--check` compared, summed over ranks (`None`: not checked).
    pub checked: Option<u64>,
    /// Fewest bytes through memory (see [`min_memory_bytes`]).
    pub min_memory_bytes: f64,
    /// The device-to-device copy bandwidth of this run, bytes per second (read + written).
    pub copy_bandwidth: f64,
    /// An empty kernel per rank timed exactly as the collective (same mode, same calls per
    /// graph), µs per call: the launch floor of this run (`None`: not measured).
    pub floor_us: Option<f64>,
}

impl Row {
    /// Algorithm bandwidth, GB/s: size over time.
    pub fn algbw(&self) -> f64 {
        if self.time_us <= 0.0 {
            0.0
        } else {
            self.total_bytes as f64 / (self.time_us * 1e3)
        }
    }

    /// Bus bandwidth, GB/s.
    pub fn busbw(&self, collective: CollectiveKind, world: u32) -> f64 {
        self.algbw() * bus_factor(collective, world)
    }

    /// Wrong elements as a percentage of those compared (`None`: not checked).
    pub fn error_percent(&self) -> Option<f64> {
        match (self.wrong, self.checked) {
            (Some(w), Some(c)) if c > 0 => Some(100.0 * w as f64 / c as f64),
            (Some(w), Some(_)) => Some(if w > 0 { 100.0 } else { 0.0 }),
            _ => None,
        }
    }

    /// Achieved memory bandwidth over the copy's: the roofline fraction.
    pub fn roofline(&self) -> f64 {
        if self.time_us <= 0.0 || self.copy_bandwidth <= 0.0 {
            return 0.0;
        }
        self.min_memory_bytes / (self.time_us * 1e-6) / self.copy_bandwidth
    }
}

/// The table header (nccl-tests style).
pub fn header(csv: bool) -> String {
    if csv {
        "collective,world,size,count,type,redop,time_us,algbw_gbs,busbw_gbs,wrong,roofline,floor_us"
            .into()
    } else {
        format!(
            "#{:>12} {:>12} {:>9} {:>6} {:>10} {:>8} {:>8} {:>7} {:>8}\n#{:>12} {:>12} {:>9} {:>6} {:>10} {:>8} {:>8} {:>7} {:>8}",
            "size",
            "count",
            "type",
            "redop",
            "time",
            "algbw",
            "busbw",
            "#wrong",
            "roofline",
            "(B)",
            "(elements)",
            "",
            "",
            "(us)",
            "(GB/s)",
            "(GB/s)",
            "",
            "(frac)"
        )
    }
}

/// One row as a table line or CSV record.
pub fn line(row: &Row, collective: CollectiveKind, world: u32, csv: bool) -> String {
    let wrong = row.wrong.map_or("N/A".to_string(), |w| w.to_string());
    let (bytes, count, dtype, redop) = (row.total_bytes, row.count, row.dtype.name(), &row.redop);
    let (time, algbw, busbw) = (row.time_us, row.algbw(), row.busbw(collective, world));
    let roofline = row.roofline();
    if csv {
        let floor = row.floor_us.map_or(String::new(), |f| format!("{f:.3}"));
        let name = collective.name();
        format!(
            "{name},{world},{bytes},{count},{dtype},{redop},{time:.3},{algbw:.3},{busbw:.3},\
             {wrong},{roofline:.4},{floor}"
        )
    } else {
        format!(
            " {bytes:>12} {count:>12} {dtype:>9} {redop:>6} {time:>10.2} {algbw:>8.2} \
             {busbw:>8.2} {wrong:>7} {roofline:>8.3}"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(time_us: f64) -> Row {
        Row {
            total_bytes: 1 << 30,
            count: 1 << 29,
            dtype: DataType::Bf16,
            redop: "sum",
            time_us,
            wrong: Some(0),
            checked: Some(1 << 29),
            floor_us: Some(1.5),
            min_memory_bytes: min_memory_bytes(CollectiveKind::AllReduce, 8, 1 << 30),
            copy_bandwidth: 4.0e12,
        }
    }

    #[test]
    fn bandwidths_follow_nccl_tests() {
        let r = row(1000.0);
        assert!((r.algbw() - 1073.741824).abs() < 1e-6);
        assert!((r.busbw(CollectiveKind::AllReduce, 8) - 1073.741824 * 1.75).abs() < 1e-6);
        assert!((r.busbw(CollectiveKind::AllGather, 8) - 1073.741824 * 0.875).abs() < 1e-6);
        // 16 GiB through memory in 1 ms at a 4 TB/s copy: 4.29.
        assert!((r.roofline() - 2.0 * 8.0 * (1u64 << 30) as f64 / 1e-3 / 4.0e12).abs() < 1e-9);
        assert_eq!(row(0.0).algbw(), 0.0);
    }

    #[test]
    fn lines_have_every_column() {
        let r = row(10.0);
        assert_eq!(
            line(&r, CollectiveKind::AllReduce, 8, true)
                .split(',')
                .count(),
            header(true).split(',').count()
        );
        assert!(line(&r, CollectiveKind::AllReduce, 8, false).contains("bfloat16"));
    }
}
