//! The committed header `include/rmcast.h` is what cbindgen makes of the
//! sources now; `RMCAST_BLESS=1 cargo test -p rmcast-ffi --test header`
//! rewrites it after a change of the C API.

use std::path::Path;

#[test]
fn header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen cannot generate the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("the header is UTF-8");
    let path = dir.join("include/rmcast.h");
    if std::env::var_os("RMCAST_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).expect("cannot write include/rmcast.h");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/rmcast.h is not what cbindgen makes of the sources; \
         regenerate it with `RMCAST_BLESS=1 cargo test -p rmcast-ffi --test header` and commit it"
    );
}
