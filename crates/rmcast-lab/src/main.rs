//! `rmcast-lab`: the lab as its own binary (also mountable as `rmcast lab`).

fn main() {
    let code = match rmcast_lab::main_with_args(std::env::args().collect()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rmcast-lab: error: {e:#}");
            2
        }
    };
    std::process::exit(code);
}
