//! `rmcast completions` and `rmcast man`: shell completion scripts and
//! manual pages generated from the same clap definition that parses the
//! command line, so they cannot drift from it. `docs/man/` holds the
//! generated pages; a test fails when they differ from what this code
//! writes (`RMCAST_BLESS=1 cargo test -p rmcast-cli --test man` renews them).

use crate::args::{CompletionsArgs, ManArgs, command};
use anyhow::{Context, Result, bail};
use std::io::Write;
use std::path::Path;

/// Writes the completion script for one shell to stdout.
pub fn completions(args: &CompletionsArgs) -> Result<()> {
    let mut cmd = command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, &mut cmd, "rmcast", &mut out);
    quiet_broken_pipe(out.flush()).context("writing the completion script")
}

/// Prints one page, or writes every page into `--out`.
pub fn man(args: &ManArgs) -> Result<()> {
    let mut cmd = command();
    cmd.build();
    if let Some(dir) = &args.out {
        let written = write_pages(&cmd, dir)?;
        eprintln!("rmcast man: wrote {written} pages into {}", dir.display());
        return Ok(());
    }
    let mut page = cmd;
    for word in &args.command {
        let name = page_name(&page);
        let Some(sub) = pages(&page).find(|s| s.get_name() == word).cloned() else {
            let known: Vec<&str> = pages(&page).map(|s| s.get_name()).collect();
            bail!(
                "`{name}` has no subcommand `{word}`; its subcommands: {}",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            );
        };
        page = sub;
    }
    let mut out = std::io::stdout().lock();
    let written = clap_mangen::Man::new(page)
        .render(&mut out)
        .and_then(|()| out.flush());
    quiet_broken_pipe(written).context("writing the manual page")
}

/// A reader that stops early (`rmcast man | head`) is not an error.
fn quiet_broken_pipe(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// The subcommands that get a page: all but hidden ones and clap's `help`.
fn pages(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
}

/// A built command's page name: `rmcast`, `rmcast-send`, `rmcast-pipe-send`.
fn page_name(cmd: &clap::Command) -> String {
    cmd.get_display_name().unwrap_or(cmd.get_name()).to_owned()
}

/// Writes `rmcast.1` and one `rmcast-SUB[-SUB].1` per subcommand of a
/// built command into `dir`; returns how many pages it wrote.
pub fn write_pages(cmd: &clap::Command, dir: &Path) -> Result<usize> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = 0;
    write_tree(cmd, dir, &mut written)?;
    Ok(written)
}

fn write_tree(cmd: &clap::Command, dir: &Path, written: &mut usize) -> Result<()> {
    let path = dir.join(format!("{}.1", page_name(cmd)));
    let mut bytes = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut bytes)
        .context("rendering a manual page")?;
    std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    *written += 1;
    for sub in pages(cmd) {
        write_tree(sub, dir, written)?;
    }
    Ok(())
}
