//! What a context knows of its symmetric buffers: where each lies and where its table of the
//! peers' copies is, so that a collective whose buffers are symmetric runs one pass over them.

use crate::memory::Span;
use purlin_device::collective::CollectiveKind;
use purlin_device::snac::SnacArgs;
use purlin_device::snac::symmetric::PeerAccess;
use std::sync::Mutex;

/// One live symmetric buffer of a context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// This rank's buffer.
    pub(crate) base: u64,
    /// Its bytes (the same on every rank).
    pub(crate) bytes: u64,
    /// Device address of the table of every rank's buffer, as this rank addresses them.
    pub(crate) table: u64,
    /// The buffer's number, the same on every rank (buffers are made collectively, in order).
    pub(crate) id: u32,
}

/// The live symmetric buffers of one context.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Buffers made so far (the next one's number minus one).
    made: u32,
    live: Vec<Entry>,
}

impl Registry {
    /// Records a new buffer and returns its number (1, 2, ...: as many buffers as were made
    /// before it, on every rank alike).
    pub(crate) fn add(&self, base: u64, bytes: u64, table: u64) -> u32 {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.made = s.made.wrapping_add(1).max(1);
        let id = s.made;
        s.live.push(Entry {
            base,
            bytes,
            table,
            id,
        });
        id
    }

    /// Forgets buffer `id`: later calls treat its memory as ordinary.
    pub(crate) fn remove(&self, id: u32) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.live.retain(|e| e.id != id);
    }

    /// The symmetric buffer `span` lies in, if any.
    pub(crate) fn find(&self, span: Span) -> Option<Entry> {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.live
            .iter()
            .find(|e| {
                span.addr >= e.base
                    && span
                        .addr
                        .checked_add(span.bytes)
                        .is_some_and(|end| end <= e.base + e.bytes)
            })
            .copied()
    }

    /// Marks a call's arguments symmetric when what it touches on the peers lies in symmetric
    /// buffers, as its collective's [`PeerAccess`] says: `src` and `dst` (AllReduce); `dst`,
    /// which it pushes into, else `src`, which it pulls from, unless in place (AllGather(V):
    /// `src` then overlaps `dst`); `src` (ReduceScatter(V), AllToAll). A V collective whose
    /// access may write the outputs, with `src` and `dst` both symmetric and apart, gets both
    /// tables: the ranks then share uneven parts out evenly. Other calls stay ordinary,
    /// AllToAllV's too ([`PeerAccess::ReadAnnounced`]: a rank cannot compute where its part
    /// lies in a peer's buffers, so its one pass needs the addresses the ranks exchange in one
    /// process, not the tables). The ranges may start anywhere in their buffers, at the same offset on
    /// every rank (the device compares the offsets). The arguments are checked first: the only
    /// overlap left is the collective's in-place form.
    pub(crate) fn mark(&self, kind: CollectiveKind, src: Span, dst: Span, args: &mut SnacArgs) {
        let table = |e: Entry| e.table as *const u64;
        let access = kind.semantics().peers;
        let (s, d, apart) = (self.find(src), self.find(dst), !overlap(src, dst));
        let shares = matches!(
            access,
            PeerAccess::WriteElseRead | PeerAccess::ReadMaybeWrite
        );
        let (src_table, dst_table) = match (access, s, d) {
            (PeerAccess::ReadWrite, Some(s), Some(d)) => (Some(s), Some(d)),
            // Uneven parts, both buffers symmetric: the ranks share the parts out evenly, each
            // moving its slice from or to the owners.
            (_, Some(s), Some(d)) if shares && kind.is_v() && apart => (Some(s), Some(d)),
            // Symmetric outputs: every rank pushes its part into every output (in place too).
            (PeerAccess::WriteElseRead, _, Some(d)) => (None, Some(d)),
            // In place on ordinary outputs: nothing to pull from.
            (PeerAccess::WriteElseRead, _, None) if !apart => (None, None),
            (
                PeerAccess::WriteElseRead | PeerAccess::ReadMaybeWrite | PeerAccess::Read,
                Some(s),
                _,
            ) => (Some(s), None),
            _ => (None, None),
        };
        if let Some(s) = src_table {
            args.src_peers = table(s);
            args.buffers |= s.id as u64;
        }
        if let Some(d) = dst_table {
            args.dst_peers = table(d);
            args.buffers |= (d.id as u64) << 32;
        }
    }
}

/// Whether two spans share a byte.
fn overlap(a: Span, b: Span) -> bool {
    a.addr < b.addr.saturating_add(b.bytes) && b.addr < a.addr.saturating_add(a.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> SnacArgs {
        SnacArgs::new(core::ptr::null_mut(), core::ptr::null(), 16, 1)
    }

    #[test]
    fn a_call_is_symmetric_only_when_what_the_peers_touch_is() {
        let r = Registry::default();
        let a = r.add(0x1000, 256, 0x9000);
        let b = r.add(0x2000, 256, 0x9100);
        assert_eq!((a, b), (1, 2));
        let (src, dst) = (Span::new(0x1000, 256), Span::new(0x2000, 128));
        let plain = Span::new(0x5000, 64);
        let mut x = args();
        r.mark(CollectiveKind::AllReduce, src, dst, &mut x);
        assert_eq!(x.src_peers as u64, 0x9000);
        assert_eq!(x.dst_peers as u64, 0x9100);
        assert_eq!(x.buffers, 1 | (2 << 32));
        // AllGather onto an ordinary dst pulls from the peers' src; a slice of a buffer is
        // symmetric too.
        let mut g = args();
        r.mark(
            CollectiveKind::AllGather,
            Span::new(0x1010, 16),
            plain,
            &mut g,
        );
        assert_eq!((g.src_peers as u64, g.buffers), (0x9000, 1));
        assert!(g.dst_peers.is_null());
        // AllGather onto a symmetric dst pushes, in place (src is part 1 of dst) or not.
        for s in [src, Span::new(0x2040, 64)] {
            let mut p = args();
            r.mark(CollectiveKind::AllGather, s, dst, &mut p);
            assert_eq!((p.dst_peers as u64, p.buffers), (0x9100, 2 << 32));
            assert!(p.src_peers.is_null());
        }
        // AllReduce with an ordinary dst, a span past its buffer's end or before its start, an
        // in-place AllGather on an ordinary output, a V collective: ordinary.
        for (kind, s, d) in [
            (CollectiveKind::AllReduce, src, plain),
            (CollectiveKind::AllGather, Span::new(0x1010, 256), plain),
            (CollectiveKind::AllGather, Span::new(0x0ff0, 32), plain),
            (CollectiveKind::AllGather, Span::new(0x5010, 16), plain),
            (
                CollectiveKind::AllGatherV,
                Span::new(0x1000, 64),
                Span::new(0x0fc0, 256),
            ),
            (CollectiveKind::AllGatherV, plain, plain),
            (CollectiveKind::ReduceScatterV, plain, dst),
            (CollectiveKind::AllToAllV, src, dst),
        ] {
            let mut o = args();
            r.mark(kind, s, d, &mut o);
            assert_eq!(o.buffers, 0, "{kind:?} {s:?} {d:?}");
            assert!(o.src_peers.is_null() && o.dst_peers.is_null());
        }
        let mut v = args();
        r.mark(CollectiveKind::AllGatherV, src, dst, &mut v);
        assert_eq!((v.src_peers as u64, v.dst_peers as u64), (0x9000, 0x9100));
        assert_eq!(v.buffers, 1 | (2 << 32));
        let mut push = args();
        r.mark(CollectiveKind::AllGatherV, plain, dst, &mut push);
        assert_eq!((push.dst_peers as u64, push.buffers), (0x9100, 2 << 32));
        assert!(push.src_peers.is_null());
        let mut both = args();
        r.mark(CollectiveKind::ReduceScatterV, src, dst, &mut both);
        assert_eq!(
            (both.src_peers as u64, both.dst_peers as u64),
            (0x9000, 0x9100)
        );
        let mut inside = args();
        r.mark(
            CollectiveKind::ReduceScatterV,
            src,
            Span::new(0x1040, 64),
            &mut inside,
        );
        assert_eq!((inside.src_peers as u64, inside.buffers), (0x9000, 1));
        assert!(inside.dst_peers.is_null());
        let mut pull = args();
        r.mark(CollectiveKind::AllGatherV, src, plain, &mut pull);
        assert_eq!((pull.src_peers as u64, pull.buffers), (0x9000, 1));
        let mut rsv = args();
        r.mark(CollectiveKind::ReduceScatterV, src, plain, &mut rsv);
        assert_eq!((rsv.src_peers as u64, rsv.buffers), (0x9000, 1));
        r.remove(a);
        let mut gone = args();
        r.mark(CollectiveKind::ReduceScatter, src, dst, &mut gone);
        assert_eq!(gone.buffers, 0);
        assert_eq!(r.add(0x3000, 16, 0x9200), 3);
    }
}
