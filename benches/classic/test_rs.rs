//! `testRS`: the original's ReduceScatter benchmark (see `purlin_bench::classic`).

fn main() -> std::process::ExitCode {
    purlin_bench::classic::main(purlin_bench::report::CollectiveKind::ReduceScatter)
}
