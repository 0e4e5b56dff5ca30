//! Builds the two kernel crates to PTX for sm_70, sm_80, sm_90 and sm_100 — `device/kernels`
//! (the collectives) and `device/atom-kernels` (grid-wide Atom kernels for tests and
//! benchmarks) — compresses each file into OUT_DIR for embedding, and leaves a plain copy in
//! `<target>/ptx/` for `ptxas` checks.

use purlin_builder::{Arch, Builder};

fn main() {
    let out = std::path::PathBuf::from(
        std::env::var_os("OUT_DIR").expect("OUT_DIR is set for build scripts"),
    );
    let plain = purlin_builder::target_dir_from_out_dir(&out).join("ptx");
    std::fs::create_dir_all(&plain).expect("create <target>/ptx");
    for krate in ["../device/kernels", "../device/atom-kernels"] {
        let builder = Builder::new(krate)
            .watch("../device/src")
            .watch("../device/Cargo.toml");
        let built = match builder.build() {
            Ok(built) => built,
            Err(e) => panic!("building {krate} to PTX failed: {e}"),
        };
        assert_eq!(built.len(), Arch::ALL.len());
        for ptx in &built {
            let text = std::fs::read(&ptx.path).expect("read built PTX");
            let packed = miniz_oxide::deflate::compress_to_vec(&text, 9);
            let name = ptx
                .path
                .file_name()
                .expect("PTX file name")
                .to_string_lossy()
                .into_owned();
            std::fs::write(out.join(format!("{name}.deflate")), packed)
                .expect("write compressed PTX");
            std::fs::copy(&ptx.path, plain.join(&name)).expect("copy PTX to <target>/ptx");
        }
    }
}
