//! Command-line arguments: what every flag means and its default.

use anyhow::{Result, bail};
use clap::{Args, CommandFactory, Parser, Subcommand};
use rmcast::HumanDuration;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

mod commands;
mod common;
mod parse;
mod protocol;
#[cfg(test)]
mod tests;

pub use commands::*;
pub use common::*;
pub use parse::ipv4_addr;
pub use protocol::*;

/// Reliable multicast: send one file to many receivers at once, verified.
///
/// Receivers join a multicast group and wait; the sender announces a
/// session, waits for the expected number of receivers, sends the file once
/// for all of them, repairs losses, and exits 0 only when every receiver
/// has confirmed a BLAKE3-verified copy.
///
/// By default everything stays on this machine: multicast goes out through
/// the loopback interface (127.0.0.1) with TTL 1.
#[derive(Parser, Debug)]
#[command(name = "rmcast", version, propagate_version = true)]
#[command(after_help = "EXAMPLES:
  rmcast demo --receivers 8 --size 64MiB --protocol nak-poll --loss 0.05
  rmcast keygen -o group.key                                # once; copy it to every node
  rmcast recv --key group.key --out /tmp/in                 # on each receiver
  rmcast send big.iso --key group.key --receivers 8
  rmcast pipe recv --key group.key > copy                   # on each receiver
  tar c dir | rmcast pipe send --key group.key --receivers 8   # a stream, not a file")]
pub struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace; or RMCAST_LOG).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

/// What every exit status means; appended to every `--help` and manual page.
const EXIT_STATUS: &str = "EXIT STATUS:
  0    done (send: every receiver verified its copy; recv: the copy is verified and in place;
       bcast: every rank verified, the same status on every rank)
  1    failed; the message names what (a receiver and why, the network, the input)
  2    the command line is wrong (unknown flag, bad value)
  3    send --min-receivers, pipe send: it reached some receivers, not all (the others are named)
  130  interrupted (Ctrl-C); a sender says goodbye, a receiver removes its partial file";

/// The command-line definition: [`Cli`] with the exit statuses appended to
/// the help of rmcast and of every subcommand, for the parser, the manual
/// pages and the completion scripts alike.
pub fn command() -> clap::Command {
    // `relay` takes send's flags for its downstream session but names its
    // groups --from/--to: send's --group and --iface (refused there), and
    // the tcp-* overlays' flags (no overlay crosses a relay), stay out of
    // its help.
    let hidden = ["group", "iface", "control", "segment_size", "fanout"];
    with_exit_status(Cli::command()).mut_subcommand("relay", |c| {
        hidden
            .iter()
            .fold(c, |c, id| c.mut_arg(*id, |a| a.hide(true)))
    })
}

fn with_exit_status(cmd: clap::Command) -> clap::Command {
    let help = match cmd.get_after_help() {
        Some(h) => format!("{h}\n\n{EXIT_STATUS}"),
        None => EXIT_STATUS.to_owned(),
    };
    cmd.after_help(help).mut_subcommands(with_exit_status)
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Make a group key: `rmcast keygen > group.key`, then pass `--key
    /// group.key` to every sender and receiver of the group.
    Keygen(KeygenArgs),
    /// Send a file or a directory tree to N receivers; exit 0 only when all verified it.
    Send(SendArgs),
    /// Receive one file into a directory (written atomically after the hash matches).
    Recv(RecvArgs),
    /// A receiving service: take session after session into one directory,
    /// one log line each, until stopped (systemd: docs/rmcast-serve.service).
    Serve(ServeArgs),
    /// Run a sender and N receivers on loopback in one process and report.
    Demo(DemoArgs),
    /// Forward a session from one group to another (another LAN segment):
    /// a receiver upstream, a sender downstream, forwarding as data
    /// arrives; exit 0 only when its copy and every receiver behind it
    /// verified. Relays cascade.
    Relay(crate::relay::RelayArgs),
    /// Stream stdin to the stdout of every receiver (PRMP, TCP-like reliable multicast).
    Pipe(crate::pipe::PipeArgs),
    /// Under a cluster's launcher (mpirun, srun, torchrun): rank 0 sends
    /// PATH, every other rank receives it; every rank exits 0 only when all
    /// verified (docs/clusters.md).
    Bcast(crate::bcast::BcastArgs),
    /// Measurement lab: network-namespace testbeds, scenario runs against
    /// peer tools (udpcast, uftp, NORM, TCP), failure detection, reports.
    Lab(rmcast_lab::LabArgs),
    /// Print a shell completion script: `rmcast completions bash >
    /// /etc/bash_completion.d/rmcast` (zsh: a `_rmcast` file on $fpath;
    /// fish: ~/.config/fish/completions/rmcast.fish).
    Completions(CompletionsArgs),
    /// Print the manual page (roff) of rmcast or of one subcommand, or
    /// write every page into a directory: `rmcast man --out /usr/local/share/man/man1`.
    Man(ManArgs),
}

/// Flags of `rmcast completions`.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Flags of `rmcast man`.
#[derive(Args, Debug)]
pub struct ManArgs {
    /// The subcommand whose page to print, as words (`pipe send`); none:
    /// the page of rmcast itself.
    #[arg(value_name = "SUBCOMMAND", conflicts_with = "out")]
    pub command: Vec<String>,
    /// Write every page (rmcast.1, rmcast-send.1, rmcast-pipe-send.1, ...)
    /// into this directory (created if missing) instead of printing one.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}
