//! Builds the user kernel crate `fused-kernel` to PTX for every architecture, exactly as a user's
//! own build script would, with `purlin-builder`.

fn main() {
    let built = purlin_builder::Builder::new("fused-kernel")
        .watch("../device/src")
        .build();
    if let Err(e) = built {
        panic!("building the example kernel crate to PTX failed: {e}");
    }
}
