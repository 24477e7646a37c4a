//! The manual pages in `docs/man/` and the completion scripts come from the
//! CLI definition: the committed pages must be what `rmcast man --out`
//! writes today (`RMCAST_BLESS=1 cargo test -p rmcast-cli --test man`
//! renews them), and every shell's script must name every subcommand.

use std::path::{Path, PathBuf};
use std::process::Command;

fn rmcast() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rmcast"))
}

fn committed_pages() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/man")
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn the_committed_manual_pages_are_what_the_cli_generates() {
    let scratch = tempfile::tempdir().unwrap();
    let out = rmcast()
        .args(["man", "--out"])
        .arg(scratch.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = listing(scratch.path());
    for page in [
        "rmcast.1",
        "rmcast-send.1",
        "rmcast-recv.1",
        "rmcast-pipe-send.1",
        "rmcast-keygen.1",
    ] {
        assert!(
            generated.iter().any(|p| p == page),
            "no {page} among {generated:?}"
        );
    }
    assert!(
        !generated.iter().any(|p| p.contains("help")),
        "{generated:?}"
    );
    let committed = committed_pages();
    if std::env::var_os("RMCAST_BLESS").is_some() {
        if committed.exists() {
            std::fs::remove_dir_all(&committed).unwrap();
        }
        std::fs::create_dir_all(&committed).unwrap();
        for page in &generated {
            std::fs::copy(scratch.path().join(page), committed.join(page)).unwrap();
        }
        return;
    }
    let how =
        "docs/man is stale: renew it with `RMCAST_BLESS=1 cargo test -p rmcast-cli --test man`";
    assert_eq!(listing(&committed), generated, "{how}");
    for page in &generated {
        let want = std::fs::read(scratch.path().join(page)).unwrap();
        let have = std::fs::read(committed.join(page)).unwrap();
        assert!(want == have, "{page} differs; {how}");
    }
}

#[test]
fn every_page_carries_the_exit_statuses() {
    for words in [&[][..], &["send"][..], &["pipe", "send"][..], &["lab"][..]] {
        let out = rmcast().arg("man").args(words).output().unwrap();
        assert!(out.status.success());
        let page = String::from_utf8(out.stdout).unwrap();
        assert!(page.contains("EXIT STATUS"), "rmcast man {words:?}");
        assert!(page.contains("130"), "rmcast man {words:?}");
    }
    let help = rmcast().args(["recv", "--help"]).output().unwrap();
    assert!(
        String::from_utf8(help.stdout)
            .unwrap()
            .contains("EXIT STATUS")
    );
}

#[test]
fn a_page_of_an_unknown_subcommand_is_refused_naming_the_known_ones() {
    let out = rmcast().args(["man", "pipe", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("`rmcast-pipe` has no subcommand `nope`"),
        "{err}"
    );
    assert!(err.contains("send, recv"), "{err}");
}

#[test]
fn completion_scripts_name_every_subcommand_and_bash_parses_its_own() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = rmcast().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        for sub in [
            "keygen",
            "send",
            "recv",
            "demo",
            "pipe",
            "lab",
            "completions",
            "man",
        ] {
            assert!(script.contains(sub), "{shell} completion lacks {sub}");
        }
        assert!(
            script.contains("receivers"),
            "{shell} completion lacks flags"
        );
    }
    let bash = rmcast().args(["completions", "bash"]).output().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rmcast.bash");
    std::fs::write(&file, bash.stdout).unwrap();
    let check = Command::new("bash").arg("-n").arg(&file).status().unwrap();
    assert!(check.success(), "bash -n refused the completion script");
    let bad = rmcast().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
}
