//! Builds the two kernel crates to PTX for every architecture of `purlin_builder::Arch` —
//! `device/kernels` (the collectives) and `device/atom-kernels` (grid-wide Atom kernels for
//! tests and benchmarks) — compresses each file into OUT_DIR for embedding, writes the tables
//! that embed them (`embedded_ptx.rs`, included by `src/ptx.rs`), and leaves a plain copy in
//! `<target>/ptx/` for `ptxas` checks.

use purlin_builder::{Arch, Builder};

fn main() {
    let out = std::path::PathBuf::from(
        std::env::var_os("OUT_DIR").expect("OUT_DIR is set for build scripts"),
    );
    let plain = purlin_builder::target_dir_from_out_dir(&out).join("ptx");
    std::fs::create_dir_all(&plain).expect("create <target>/ptx");
    let mut tables = String::new();
    for (krate, table, stem) in [
        ("../device/kernels", "KERNELS", "purlin_kernels"),
        (
            "../device/atom-kernels",
            "ATOM_KERNELS",
            "purlin_atom_kernels",
        ),
    ] {
        tables += &format!("static {table}: [EmbeddedPtx; {}] = [\n", Arch::ALL.len());
        for arch in Arch::ALL {
            let file = format!("{stem}.{}", arch.name());
            tables += &format!("    embedded!({arch:?}, \"{file}\", \"{file}.ptx.deflate\"),\n");
        }
        tables += "];\n";
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
    std::fs::write(out.join("embedded_ptx.rs"), tables).expect("write the embedding tables");
}
