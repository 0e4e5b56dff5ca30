//! The codesign table a call's plan comes from: the compiled-in rows, with the rows of the
//! `PURLIN_TUNING` file in front, and the check that a row (or an `Options::choice`) can run.

use super::*;
use purlin_tuning::{Row, Table};
use std::sync::OnceLock;

/// The codesign table in use: the file named by `PURLIN_TUNING` (read once) in front of the
/// compiled-in rows. A file that cannot be read or parsed is an error, here and at every call
/// that needs a plan (nothing is silently ignored).
///
/// ```
/// let table = purlin::collective::table()?;
/// assert!(!table.rows().is_empty());
/// # Ok::<(), purlin::Error>(())
/// ```
pub fn table() -> Result<Table<'static>> {
    static ROWS: OnceLock<std::result::Result<Vec<Row>, String>> = OnceLock::new();
    let rows = ROWS.get_or_init(|| {
        let mut rows = Vec::new();
        if let Some(path) = std::env::var_os("PURLIN_TUNING") {
            let shown = path.to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{shown}: {e}"))?;
            rows = Table::parse(&text).map_err(|e| format!("{shown}: {e}"))?;
            tracing::info!(path = %shown, rows = rows.len(), "loaded tuning table");
        }
        Ok(merge(rows, Table::builtin().rows()))
    });
    match rows {
        Ok(rows) => Ok(Table::new(rows)),
        Err(reason) => Err(Error::InvalidArgument {
            what: "PURLIN_TUNING",
            reason: reason.clone(),
        }),
    }
}

/// A loaded table's rows in front of the compiled-in ones: rows of the file win over
/// compiled-in rows of the same (architecture, world, collective), every band of them; the
/// compiled-in keys the file lacks keep all their bands.
fn merge(loaded: Vec<Row>, builtin: &[Row]) -> Vec<Row> {
    let same_key =
        |a: &Row, b: &Row| a.arch == b.arch && a.world == b.world && a.collective == b.collective;
    let kept: Vec<Row> = builtin
        .iter()
        .filter(|r| !loaded.iter().any(|l| same_key(l, r)))
        .copied()
        .collect();
    let mut rows = loaded;
    rows.extend(kept);
    rows
}

/// A launch shape and plan that cannot run is refused with the reason (a table row or an
/// `Options::choice`): blocks outside `1..=MAX_BLOCKS`, no chunk, thresholds that do not fit.
pub(super) fn check_choice(choice: &Choice, kind: CollectiveKind, bytes: u64) -> Result<()> {
    let refuse = |reason: String| {
        Err(Error::InvalidArgument {
            what: "plan",
            reason: format!("{} of {bytes} bytes: {reason}", kind.name()),
        })
    };
    if choice.blocks == 0 || choice.blocks as usize > MAX_BLOCKS {
        return refuse(format!(
            "{} blocks is not in 1..={MAX_BLOCKS}",
            choice.blocks
        ));
    }
    if choice.plan.chunk_bytes < 16 {
        return refuse(format!(
            "a chunk of {} bytes holds no 16-byte unit",
            choice.plan.chunk_bytes
        ));
    }
    if choice.plan.put_blocks == 0 {
        return refuse("no producer blocks".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every band of a compiled-in key survives the merge (it once kept only the first band of
    /// each key, so every AllReduce ran with the small-message row).
    #[test]
    fn merge_keeps_every_builtin_band_and_lets_the_file_win() {
        let builtin = Table::builtin();
        assert_eq!(merge(Vec::new(), builtin.rows()), builtin.rows());
        assert!(table().is_ok());

        let mut file_row = *builtin
            .rows()
            .iter()
            .find(|r| r.arch == 90 && r.world == 8 && r.collective == CollectiveKind::AllReduce)
            .unwrap();
        file_row.blocks = 3;
        file_row.max_bytes = u64::MAX;
        let merged = merge(vec![file_row], builtin.rows());
        let table = Table::new(&merged);
        for bytes in [0, 1 << 20, 1 << 30] {
            assert_eq!(
                table.lookup(90, 8, CollectiveKind::AllReduce, bytes).blocks,
                3
            );
        }
        // Other keys keep every band.
        let bands = |rows: &[Row]| {
            rows.iter()
                .filter(|r| {
                    r.arch == 90 && r.world == 8 && r.collective == CollectiveKind::AllGather
                })
                .count()
        };
        assert_eq!(bands(&merged), bands(builtin.rows()));
        assert!(bands(&merged) > 1);
    }
}
