//! `testAG`: the original's AllGather benchmark (see `purlin_bench::classic`).

fn main() -> std::process::ExitCode {
    purlin_bench::classic::main(purlin_bench::report::CollectiveKind::AllGather)
}
