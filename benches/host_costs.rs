//! Criterion benchmarks of host-side costs, so a regression there shows: creating and tearing
//! down a communicator on the CPU emulation, codesign-table lookups and table files, and the
//! argument checks every call makes before it launches.

use criterion::{Criterion, criterion_group, criterion_main};
use purlin::Context;
use purlin::bootstrap::run_in_process;
use purlin::memory::{HostAllocator, Span};
use purlin::validate;
use purlin::workspace::{Workspace, WorkspaceRequirements};
use purlin_tuning::{CollectiveKind, Table, write_rows};
use std::hint::black_box;

fn context_lifecycle(c: &mut Criterion) {
    let mut group = c.benchmark_group("context");
    for world in [2u32, 8] {
        group.bench_function(
            format!("create+finalize, {world} ranks, CPU emulation"),
            |b| {
                b.iter(|| {
                    run_in_process(world, |boot| {
                        let ws = Workspace::new(
                            &boot,
                            HostAllocator::new(),
                            WorkspaceRequirements::small(),
                        )?;
                        let ctx = Context::new_host(ws.rank(), world, ws)?;
                        black_box(ctx.device_view());
                        ctx.finalize()
                    })
                    .unwrap()
                })
            },
        );
    }
    group.finish();
}

fn tuning(c: &mut Criterion) {
    let table = Table::builtin();
    c.bench_function("table lookup (sm_90, 8 ranks, AllReduce, 1 MiB)", |b| {
        b.iter(|| {
            black_box(table.lookup(
                black_box(90),
                black_box(8),
                CollectiveKind::AllReduce,
                black_box(1 << 20),
            ))
        })
    });
    let text = write_rows(table.rows());
    c.bench_function("table file parse (builtin rows)", |b| {
        b.iter(|| black_box(Table::parse(black_box(&text)).unwrap()))
    });
}

fn argument_checks(c: &mut Criterion) {
    let src = Span::new(0x7f00_0000_0000, 1 << 20);
    c.bench_function("argument checks of one collective", |b| {
        b.iter(|| {
            let bytes = validate::elements_to_bytes("count", black_box(1 << 18), 4).unwrap();
            validate::check_buffer("src", black_box(src), bytes, 16).unwrap();
            validate::check_buffer("dst", black_box(src), bytes, 16).unwrap();
            validate::check_rank(black_box(3), black_box(8)).unwrap();
            validate::check_world(black_box(8)).unwrap();
        })
    });
}

/// What the safety checks of this release add to every call: the size products, the overlap
/// rule, and the typed forms' same-stream test (one `Arc` pointer comparison, here on two
/// `Arc`s standing in for the buffer's and the context's stream).
fn safety_checks(c: &mut Criterion) {
    let (src, dst) = (
        Span::new(0x7f00_0000_0000, 8 << 20),
        Span::new(0x7f10_0000_0000, 8 << 20),
    );
    let (stream, same) = {
        let a = std::sync::Arc::new(0u64);
        (a.clone(), a)
    };
    c.bench_function("safety checks added to one collective call", |b| {
        b.iter(|| {
            let bytes = validate::elements_to_bytes("count", black_box(1 << 18), 4).unwrap();
            let s = validate::parts_to_bytes("src", bytes, black_box(8)).unwrap();
            let d = validate::parts_to_bytes("dst", bytes, black_box(8)).unwrap();
            validate::check_aliasing(
                black_box(src),
                s,
                black_box(dst),
                d,
                validate::Aliasing::Disjoint,
            )
            .unwrap();
            black_box(std::sync::Arc::ptr_eq(black_box(&stream), black_box(&same)))
        })
    });
}

criterion_group!(
    benches,
    context_lifecycle,
    tuning,
    argument_checks,
    safety_checks
);
criterion_main!(benches);
