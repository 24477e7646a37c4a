//! Builds the NORM file driver (C++, against libnorm's `normApi.h`) when
//! the header is installed; otherwise the lab reports NORM as unavailable.

fn main() {
    println!("cargo:rustc-check-cfg=cfg(rml_norm)");
    println!("cargo:rerun-if-changed=norm/norm_driver.cpp");
    println!("cargo:rerun-if-env-changed=RMCAST_LAB_NO_NORM");
    let header = ["/usr/include/normApi.h", "/usr/local/include/normApi.h"]
        .iter()
        .any(|p| std::path::Path::new(p).exists());
    if !header || std::env::var_os("RMCAST_LAB_NO_NORM").is_some() {
        println!(
            "cargo:warning=normApi.h not found: the NORM peer driver is left out (apt-get install libnorm-dev)"
        );
        return;
    }
    cc::Build::new()
        .cpp(true)
        .file("norm/norm_driver.cpp")
        .flag_if_supported("-std=c++11")
        .flag_if_supported("-Wno-unused-parameter")
        .compile("rml_norm_driver");
    println!("cargo:rustc-link-lib=norm");
    println!("cargo:rustc-cfg=rml_norm");
}
