//! Compiles the small C helper that does INCRBYFLOAT arithmetic in `long double`, as Redis does.
fn main() {
    println!("cargo:rerun-if-changed=csrc/long_double.c");
    cc::Build::new()
        .file("csrc/long_double.c")
        .opt_level(2)
        .compile("damselfly_long_double");
}
