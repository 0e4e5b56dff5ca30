//! `testA2A`: the original's AllToAll benchmark (see `purlin_bench::classic`).

fn main() -> std::process::ExitCode {
    purlin_bench::classic::main(purlin_bench::report::CollectiveKind::AllToAll)
}
