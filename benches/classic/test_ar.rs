//! `testAR`: the original's AllReduce benchmark (see `purlin_bench::classic`).

fn main() -> std::process::ExitCode {
    purlin_bench::classic::main(purlin_bench::report::CollectiveKind::AllReduce)
}
