//! The positional arguments of the original's benchmarks: `[minBytes] [maxBytes]
//! [graphLaunches] [runs] [warmup] [seed]`, sizes with K/M/G suffixes, doubling.

/// Parses `128`, `4K`, `16M`, `1G` (binary multiples; lower case too).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, shift) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 10),
        Some('m' | 'M') => (&s[..s.len() - 1], 20),
        Some('g' | 'G') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size (a number with an optional K, M or G)"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s} overflows"))
}

/// The sweep: `min`, `2 min`, … up to `max` inclusive (just `min` when `min == max`).
pub fn doubling(min: u64, max: u64) -> Vec<u64> {
    let mut sizes = Vec::new();
    let mut s = min.max(1);
    if min == 0 {
        sizes.push(0);
    }
    while s <= max {
        sizes.push(s);
        match s.checked_mul(2) {
            Some(next) => s = next,
            None => break,
        }
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("128"), Ok(128));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("16m"), Ok(16 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("99999999999G").is_err());
    }

    #[test]
    fn sweep_doubles_inclusive() {
        assert_eq!(doubling(8, 64), vec![8, 16, 32, 64]);
        assert_eq!(doubling(8, 100), vec![8, 16, 32, 64]);
        assert_eq!(doubling(4096, 4096), vec![4096]);
        assert_eq!(doubling(0, 2), vec![0, 1, 2]);
    }
}
