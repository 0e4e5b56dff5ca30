//! # purlin-tuning
//!
//! Codesign tables: for an (architecture, world size, collective, message-size band), the launch
//! shape (blocks, threads) and the SNAC [`Plan`] (producer blocks, chunk size, latency threshold,
//! algorithm) to run with. The tables are `const` data, usable from host code and from fused
//! device code; the host can also load a table file written by the tuner
//! (`PURLIN_TUNING=path`, see [`Table::parse`]), keeping the compiled-in table as the default.
//!
//! The size a band is keyed by is the collective's *dispatch size*: AllReduce the whole payload,
//! AllGather each rank's input, ReduceScatter each rank's output shard, AllToAll each part
//! sent to one peer (the V forms: the largest of those).
//!
//! ```
//! use purlin_device::collective::CollectiveKind;
//! use purlin_tuning::Table;
//! let choice = Table::builtin().lookup(90, 8, CollectiveKind::AllReduce, 1 << 30);
//! assert!(choice.blocks >= 8 && choice.plan.chunk_bytes > 0);
//! ```

#![no_std]
#![warn(missing_docs)]

#[cfg(feature = "std")]
extern crate std;

#[cfg(feature = "std")]
mod file;
mod sm90;

pub use purlin_device::collective::{Algorithm, CollectiveKind};
pub use purlin_device::snac::{Plan, ReductionMode};

/// One band of one table row: up to `max_bytes` (dispatch size), launch `blocks` blocks of
/// `plan.threads` threads with `plan`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// Compute capability (`major * 10 + minor`) the row was tuned on; it serves every device
    /// of this capability or newer until a newer row exists.
    pub arch: u32,
    /// World size the row was tuned for (`0`: any world).
    pub world: u32,
    /// The collective.
    pub collective: CollectiveKind,
    /// The band's upper bound, bytes (inclusive; `u64::MAX` for the last band).
    pub max_bytes: u64,
    /// Blocks per launch.
    pub blocks: u32,
    /// The SNAC plan.
    pub plan: Plan,
}

/// What a lookup returns: the launch shape and plan of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// Blocks per launch.
    pub blocks: u32,
    /// The SNAC plan (`plan.threads` threads per block).
    pub plan: Plan,
}

/// The rows every device falls back to: the original's base policy, blocks scaled with the
/// world, for any architecture and world.
const GENERIC: &[Row] = &{
    let mut rows = [Row {
        arch: 0,
        world: 0,
        collective: CollectiveKind::AllReduce,
        max_bytes: u64::MAX,
        blocks: 32,
        plan: Plan::DEFAULT,
    }; 7];
    let mut i = 0;
    while i < 7 {
        rows[i].collective = CollectiveKind::ALL[i];
        i += 1;
    }
    rows
};

/// A codesign table: rows in any order; lookups pick the most specific match.
#[derive(Clone, Copy, Debug)]
pub struct Table<'a> {
    rows: &'a [Row],
}

impl Table<'static> {
    /// The compiled-in table: the H200-tuned sm_90 rows, then the generic fallback.
    pub const fn builtin() -> Self {
        Table { rows: BUILTIN }
    }
}

/// Compiled-in rows: tuned ones first.
static BUILTIN: &[Row] = &{
    const N: usize = sm90::ROWS.len() + GENERIC.len();
    let mut rows = [GENERIC[0]; N];
    let mut i = 0;
    while i < sm90::ROWS.len() {
        rows[i] = sm90::ROWS[i];
        i += 1;
    }
    let mut j = 0;
    while j < GENERIC.len() {
        rows[i + j] = GENERIC[j];
        j += 1;
    }
    rows
};

impl<'a> Table<'a> {
    /// A table over these rows (a parsed file, or rows of your own).
    pub const fn new(rows: &'a [Row]) -> Self {
        Table { rows }
    }

    /// The rows.
    pub const fn rows(&self) -> &'a [Row] {
        self.rows
    }

    /// The launch shape and plan for `collective` with dispatch size `bytes` on `world` ranks of
    /// compute capability `arch`: among rows for this collective, the newest architecture not
    /// newer than `arch`, then the exact world (else the largest smaller one, else any), then
    /// the narrowest band that holds `bytes`. Falls back to the original's base policy.
    pub fn lookup(&self, arch: u32, world: u32, collective: CollectiveKind, bytes: u64) -> Choice {
        let candidates = || {
            self.rows
                .iter()
                .filter(move |r| r.collective == collective && r.arch <= arch)
        };
        let Some(best_arch) = candidates().map(|r| r.arch).max() else {
            return fallback(world);
        };
        let same_arch = || candidates().filter(move |r| r.arch == best_arch);
        let best_world = same_arch()
            .map(|r| r.world)
            .filter(|&w| w == world)
            .max()
            .or_else(|| {
                same_arch()
                    .map(|r| r.world)
                    .filter(|&w| w != 0 && w < world)
                    .max()
            })
            .or_else(|| same_arch().map(|r| r.world).filter(|&w| w == 0).max())
            .or_else(|| same_arch().map(|r| r.world).min());
        let Some(best_world) = best_world else {
            return fallback(world);
        };
        let rows = || same_arch().filter(move |r| r.world == best_world);
        let band = rows()
            .filter(|r| bytes <= r.max_bytes)
            .min_by_key(|r| r.max_bytes);
        let band = band.or_else(|| rows().max_by_key(|r| r.max_bytes));
        match band {
            Some(r) => Choice {
                blocks: r.blocks,
                plan: r.plan,
            },
            None => fallback(world),
        }
    }
}

fn fallback(_world: u32) -> Choice {
    Choice {
        blocks: 32,
        plan: Plan::DEFAULT,
    }
}

#[cfg(feature = "std")]
pub use file::{ParseError, write_rows};

#[cfg(test)]
mod tests {
    use super::*;

    fn row(arch: u32, world: u32, max_bytes: u64, blocks: u32) -> Row {
        Row {
            arch,
            world,
            collective: CollectiveKind::AllGather,
            max_bytes,
            blocks,
            plan: Plan::DEFAULT,
        }
    }

    #[test]
    fn lookup_prefers_arch_then_world_then_band() {
        let rows = [
            row(80, 8, 1 << 20, 1),
            row(90, 8, 1 << 20, 2),
            row(90, 8, u64::MAX, 3),
            row(90, 4, u64::MAX, 4),
            row(90, 0, u64::MAX, 5),
        ];
        let t = Table::new(&rows);
        assert_eq!(t.lookup(90, 8, CollectiveKind::AllGather, 1000).blocks, 2);
        assert_eq!(
            t.lookup(90, 8, CollectiveKind::AllGather, 2 << 20).blocks,
            3
        );
        assert_eq!(t.lookup(100, 8, CollectiveKind::AllGather, 1000).blocks, 2);
        assert_eq!(t.lookup(86, 8, CollectiveKind::AllGather, 1000).blocks, 1);
        assert_eq!(t.lookup(90, 6, CollectiveKind::AllGather, 1000).blocks, 4);
        assert_eq!(t.lookup(90, 2, CollectiveKind::AllGather, 1000).blocks, 5);
        assert_eq!(
            t.lookup(70, 8, CollectiveKind::AllGather, 1000),
            fallback(8)
        );
        assert_eq!(
            t.lookup(90, 8, CollectiveKind::AllReduce, 1000),
            fallback(8)
        );
    }

    #[test]
    fn builtin_covers_every_collective_world_and_size() {
        for c in CollectiveKind::ALL {
            for world in 1..=16 {
                for bytes in [0u64, 1, 4096, 1 << 20, 1 << 30] {
                    let choice = Table::builtin().lookup(90, world, c, bytes);
                    assert!(
                        choice.blocks >= 1
                            && choice.blocks as usize <= purlin_device::context::MAX_BLOCKS
                    );
                    assert!(choice.plan.threads >= 32 && choice.plan.chunk_bytes >= 16);
                }
            }
        }
    }

    /// The compiled-in sm_90 rows are the table the tuner wrote on the H200 (shipped beside
    /// the benchmarks), so the two cannot drift apart.
    #[test]
    fn builtin_sm90_rows_are_the_h200_tuner_table() {
        let tuned = Table::parse(include_str!("../tables/sm90-h200.table")).unwrap();
        assert!(!tuned.is_empty());
        let builtin = Table::builtin();
        for t in &tuned {
            let got = builtin
                .rows()
                .iter()
                .find(|r| {
                    r.arch == t.arch
                        && r.world == t.world
                        && r.collective == t.collective
                        && r.max_bytes == t.max_bytes
                })
                .unwrap_or_else(|| panic!("no built-in row for {t:?}"));
            assert_eq!(got.blocks, t.blocks, "{t:?}");
            assert_eq!(got.plan, t.plan, "{t:?}");
        }
    }
}
