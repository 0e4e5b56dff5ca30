//! Cutting work into nearly equal pieces, in whole units (16-byte vectors, elements, chunks).
//!
//! ```
//! use purlin_device::partition::even_split;
//! // 10 units over 4 parts: the first 10 % 4 = 2 parts get one more.
//! assert_eq!(even_split(10, 4, 0), (0, 3));
//! assert_eq!(even_split(10, 4, 1), (3, 3));
//! assert_eq!(even_split(10, 4, 2), (6, 2));
//! assert_eq!(even_split(10, 4, 3), (8, 2));
//! ```

/// The `part`-th of `parts` pieces of `units`: `(first unit, units in it)`. Pieces are
/// contiguous and in order; the first `units % parts` pieces hold one unit more. `parts` must
/// not be zero.
#[inline(always)]
pub const fn even_split(units: usize, parts: usize, part: usize) -> (usize, usize) {
    let base = units / parts;
    let extra = units % parts;
    if part < extra {
        (part * (base + 1), base + 1)
    } else {
        (extra * (base + 1) + (part - extra) * base, base)
    }
}

/// The byte range `(offset, len)` of `part` when `bytes` is cut into `parts` pieces of whole
/// `unit`s; the last piece also takes the bytes after the last whole unit.
#[inline(always)]
pub const fn split_bytes(bytes: usize, unit: usize, parts: usize, part: usize) -> (usize, usize) {
    let (first, count) = even_split(bytes / unit, parts, part);
    let mut len = count * unit;
    if part + 1 == parts {
        len += bytes % unit;
    }
    (first * unit, len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn pieces_tile_the_range(units in 0usize..100_000, parts in 1usize..300) {
            let mut next = 0;
            for part in 0..parts {
                let (start, len) = even_split(units, parts, part);
                prop_assert_eq!(start, next);
                prop_assert!(len == units / parts || len == units / parts + 1);
                next = start + len;
            }
            prop_assert_eq!(next, units);
        }

        #[test]
        fn byte_pieces_tile_the_range(bytes in 0usize..1_000_000, parts in 1usize..200) {
            let mut next = 0;
            for part in 0..parts {
                let (offset, len) = split_bytes(bytes, 16, parts, part);
                prop_assert_eq!(offset, next);
                prop_assert_eq!(offset % 16, 0);
                next = offset + len;
            }
            prop_assert_eq!(next, bytes);
        }
    }
}
