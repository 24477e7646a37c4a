//! Scenario files (TOML): the tools, their parameters, and the sweep.
//!
//! ```toml
//! name = "smoke"
//! testbed = "netns"          # or "local" (loopback, no root), or "ssh" (--inventory)
//! receivers = [3]
//! sizes = ["4MiB"]
//! rates = ["100mbit"]        # per-host egress (tc tbf); "none" = unshaped
//! loss = [0.01]              # random loss on each receiver's input
//! repeats = 1
//!
//! [[tools]]
//! name = "rmcast-nak-poll"
//! kind = "rmcast"
//! protocol = "nak-poll"
//! ```
//!
//! `segments = [10, 10, 10]` (receivers per segment, the sender's first)
//! makes the scenario segmented: `kind = "cascade"` tools run on a LAN of
//! that many bridges joined by relay hosts (`testbed/segments.rs`), every
//! other tool on one flat LAN of the same total, in the same run;
//! `receivers` may then be left out (it is the total); `relay_from =
//! [0, 0]` says which segment each relay receives from (default a chain). `[[claims]]` state
//! goodputs against the link rate (`claims.rs`).

pub mod claims;
pub mod files;
pub(crate) mod judge;
pub mod metrics;
pub mod record;
pub mod runner;
pub mod symmetric;
mod watch;

pub use crate::tools::{Tool, ToolKind};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Which testbed a scenario runs on.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum TestbedKind {
    /// Network namespaces on a bridge (root).
    Netns,
    /// Loopback (no root; rmcast and MultiTCP only).
    Local,
    /// Real hosts named in an inventory file, over OpenSSH (`--inventory`).
    Ssh,
}

/// Where receivers write their copies.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Copies {
    /// Beside the run's logs, on the output directory's file system. On one
    /// box every receiver's writeback and fsync lands on the same disk,
    /// which no real group of N machines shares.
    #[default]
    Disk,
    /// On tmpfs (`/dev/shm`), one directory per run, removed after it is
    /// verified: the transfer is measured without the shared disk. Each
    /// copy costs memory while the run lasts (N × size).
    Tmpfs,
}

/// Deliberate faults, to prove the failure detector (tests use these).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Inject {
    /// SIGSTOP this receiver (1..N) `stop_after_s` after the sender starts.
    #[serde(default)]
    pub stop_receiver: Option<usize>,
    /// Seconds after the sender's start.
    #[serde(default)]
    pub stop_after_s: f64,
    /// Flip a byte of this receiver's output file before verification.
    #[serde(default)]
    pub corrupt_receiver: Option<usize>,
}

/// A scenario: every combination of receivers × sizes × rates × loss × tools × repeats is a run.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name, for the report.
    pub name: String,
    /// Testbed kind.
    #[serde(default = "default_testbed")]
    pub testbed: TestbedKind,
    /// Receiver counts (with `segments`: their total, or left out).
    #[serde(default)]
    pub receivers: Vec<u16>,
    /// Receivers per segment, the sender's segment first: `cascade` tools
    /// run on that many bridges joined by relays, the others flat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segments: Option<Vec<u16>>,
    /// With `segments`: the segment each relay 1.. receives from (relay k
    /// feeds segment k); default the chain `[0, 1, …]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay_from: Option<Vec<usize>>,
    /// Object sizes (`4MiB`, `20MB`).
    pub sizes: Vec<String>,
    /// Per-host egress rates (`100mbit`, `1gbit`, `none`).
    #[serde(default = "default_rates")]
    pub rates: Vec<String>,
    /// Loss probabilities on the receivers' input.
    #[serde(default = "default_loss")]
    pub loss: Vec<f64>,
    /// Repeats per point.
    #[serde(default = "default_repeats")]
    pub repeats: u32,
    /// veth MTU (9000 = jumbo).
    #[serde(default = "default_mtu")]
    pub mtu: u32,
    /// Deadlock/livelock: no receiver progress for this long fails the run.
    #[serde(default = "default_stall_s")]
    pub stall_s: f64,
    /// Start-up allowance added to the 1 %-of-expected-goodput time limit.
    #[serde(default = "default_startup_s")]
    pub startup_s: f64,
    /// Hard cap on one run, seconds.
    #[serde(default = "default_max_run_s")]
    pub max_run_s: f64,
    /// Seconds receivers get to exit after the sender finished.
    #[serde(default = "default_grace_s")]
    pub grace_s: f64,
    /// Where receivers write their copies (`disk` or `tmpfs`).
    #[serde(default)]
    pub copies: Copies,
    /// Faults to inject (tests).
    #[serde(default)]
    pub inject: Inject,
    /// The tools.
    pub tools: Vec<Tool>,
    /// Claims judged after the run (G against the link rate).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<claims::Claim>,
}

fn default_testbed() -> TestbedKind {
    TestbedKind::Netns
}
fn default_rates() -> Vec<String> {
    vec!["100mbit".into()]
}
fn default_loss() -> Vec<f64> {
    vec![0.0]
}
fn default_repeats() -> u32 {
    1
}
fn default_mtu() -> u32 {
    1500
}
fn default_stall_s() -> f64 {
    15.0
}
fn default_startup_s() -> f64 {
    10.0
}
fn default_max_run_s() -> f64 {
    600.0
}
fn default_grace_s() -> f64 {
    8.0
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> Result<Scenario> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Scenario::parse(&text)
    }

    /// Parses and checks scenario text.
    pub fn parse(text: &str) -> Result<Scenario> {
        let s: Scenario = toml::from_str(text).context("invalid scenario TOML")?;
        s.validate()?;
        Ok(s)
    }

    /// The segments, checked (None: a flat scenario).
    pub fn segment_layout(&self) -> Result<Option<crate::testbed::Segments>> {
        if self.relay_from.is_some() && self.segments.is_none() {
            bail!("relay_from needs segments");
        }
        self.segments
            .as_deref()
            .map(|seg| match &self.relay_from {
                None => crate::testbed::Segments::new(seg),
                Some(from) => crate::testbed::Segments::with_relays(seg, from),
            })
            .transpose()
            .map_err(|e| anyhow::anyhow!("segments: {e}"))
    }

    /// The receiver counts swept: `receivers`, or the segments' total.
    pub fn receiver_counts(&self) -> Vec<u16> {
        match (&self.segments, self.receivers.is_empty()) {
            (Some(seg), true) => vec![seg.iter().sum()],
            _ => self.receivers.clone(),
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let layout = self.segment_layout()?;
        if let Some(seg) = &layout {
            if self.receiver_counts() != [seg.total() as u16] {
                bail!(
                    "with segments {:?}, receivers must be left out or be [{}] (their total)",
                    seg.per_segment(),
                    seg.total()
                );
            }
            if seg.total() > 250 && self.tools.iter().any(|t| t.kind != ToolKind::Cascade) {
                bail!("the flat LAN beside the segments holds at most 250 receivers");
            }
        } else if self.receivers.is_empty() || self.receivers.iter().any(|&n| n == 0 || n > 250) {
            bail!("receivers must list counts in 1..=250");
        }
        for s in &self.sizes {
            crate::units::parse_size(s).map_err(anyhow::Error::msg)?;
        }
        if self.sizes.is_empty()
            || self.rates.is_empty()
            || self.loss.is_empty()
            || self.tools.is_empty()
        {
            bail!("sizes, rates, loss and tools must not be empty");
        }
        for r in &self.rates {
            crate::units::parse_rate_opt(r).map_err(anyhow::Error::msg)?;
        }
        if self.loss.iter().any(|p| !(0.0..1.0).contains(p)) {
            bail!("loss probabilities must be in 0..1");
        }
        if self.repeats == 0 {
            bail!("repeats must be at least 1");
        }
        let mut names: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            bail!("tool names must be unique");
        }
        for c in &self.claims {
            if !self.tools.iter().any(|t| t.name == c.tool) {
                bail!("claim {:?}: no tool named {}", c.text, c.tool);
            }
            if !(0.0..=1.0).contains(&c.min_fraction_of_rate) {
                bail!("claim {:?}: min_fraction_of_rate must be in 0..=1", c.text);
            }
        }
        for t in &self.tools {
            if t.kind == ToolKind::Cascade {
                if layout.is_none() {
                    bail!(
                        "tool {}: kind = \"cascade\" needs `segments` (receivers per segment)",
                        t.name
                    );
                }
                if let Some(p) = t.protocol.as_deref()
                    && !crate::tools::cascade::PROTOCOLS.contains(&p)
                {
                    bail!(
                        "tool {}: a cascade runs a multicast protocol ({}), not {p}",
                        t.name,
                        crate::tools::cascade::PROTOCOLS.join(", ")
                    );
                }
                if t.senders.is_some_and(|k| k > 1) {
                    bail!("tool {}: a cascade has one sender", t.name);
                }
            } else if !t.relay_args.is_empty() {
                bail!(
                    "tool {}: `relay_args` applies to kind = \"cascade\" only",
                    t.name
                );
            }
            if t.kind == ToolKind::Rmcast {
                if let Some(p) = t.protocol.as_deref()
                    && !crate::tools::rmcast::accepts(p)
                {
                    bail!("tool {}: unknown rmcast protocol {p}", t.name);
                }
            } else if t.protocol.is_some() && t.kind != ToolKind::Cascade {
                bail!(
                    "tool {}: `protocol` applies to kind = \"rmcast\" or \"cascade\" only",
                    t.name
                );
            }
            if t.kind == ToolKind::Blast {
                crate::tools::blast::plan_numbers(&t.args, 1, None)
                    .map_err(|e| anyhow::anyhow!("tool {}: {e}", t.name))?;
            }
            if let Some(k) = t.senders {
                let hunt = t
                    .args
                    .windows(2)
                    .any(|w| w[0] == "--rate-control" && w[1] == "hunt")
                    || t.args.iter().any(|a| a == "--rate-control=hunt");
                let tcp = t.protocol.as_deref().is_some_and(|p| p.starts_with("tcp-"));
                if k == 0 || k > 64 {
                    bail!("tool {}: senders must be in 1..=64", t.name);
                }
                if k > 1 && (t.kind != ToolKind::Rmcast || tcp || !hunt) {
                    bail!(
                        "tool {}: senders > 1 needs kind = \"rmcast\" (a multicast protocol) with args --rate-control hunt",
                        t.name
                    );
                }
            }
            if let Some(f) = t.rate_fraction
                && !(0.01..=1.0).contains(&f)
            {
                bail!("tool {}: rate_fraction must be in 0.01..=1", t.name);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_scenarios_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/scenarios");
        let mut parsed = Vec::new();
        for entry in std::fs::read_dir(&dir).expect("lab/scenarios") {
            let p = entry.expect("directory entry").path();
            if p.extension().is_some_and(|e| e == "toml") {
                Scenario::load(&p).unwrap_or_else(|e| panic!("{}: {e:#}", p.display()));
                parsed.push(p.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
        for f in [
            "smoke.toml",
            "fastpath.toml",
            "fastpath-1g.toml",
            "fastpath-small.toml",
            "cascade-100mbit.toml",
            "cascade-quick.toml",
        ] {
            assert!(
                parsed.iter().any(|p| p == f),
                "{f} not found in {}",
                dir.display()
            );
        }
    }

    #[test]
    fn unknown_fields_and_protocols_are_refused() {
        let base = "name='x'\nreceivers=[1]\nsizes=['1MiB']\n";
        assert!(
            Scenario::parse(&format!(
                "{base}bogus=1\n[[tools]]\nname='a'\nkind='rmcast'\n"
            ))
            .is_err()
        );
        let e = Scenario::parse(&format!(
            "{base}[[tools]]\nname='a'\nkind='rmcast'\nprotocol='fast'\n"
        ))
        .unwrap_err();
        assert!(format!("{e:#}").contains("unknown rmcast protocol"));
        assert!(Scenario::parse(&format!("{base}[[tools]]\nname='a'\nkind='uftp'\n")).is_ok());
        let two = format!("{base}[[tools]]\nname='a'\nkind='rmcast'\nsenders=2\n");
        let e = Scenario::parse(&two).unwrap_err();
        assert!(format!("{e:#}").contains("--rate-control hunt"));
        let sc = Scenario::parse(&format!("{two}args=['--rate-control', 'hunt']\n")).unwrap();
        assert_eq!(sc.tools[0].sender_count(), 2);
    }

    #[test]
    fn segments_set_the_total_and_cascades_need_them() {
        let tools = "[[tools]]\nname='flat'\nkind='rmcast'\n[[tools]]\nname='c'\nkind='cascade'\nprotocol='ring'\nrelay_args=['--window','32']\n";
        let sc = Scenario::parse(&format!(
            "name='x'\nsegments=[10,10,10]\nsizes=['1MiB']\n{tools}"
        ))
        .unwrap();
        assert_eq!(sc.receiver_counts(), vec![30]);
        assert_eq!(sc.segment_layout().unwrap().unwrap().relays(), 2);
        // receivers, when given, must be the total.
        assert!(
            Scenario::parse(&format!(
                "name='x'\nsegments=[1,2]\nreceivers=[3]\nsizes=['1MiB']\n{tools}"
            ))
            .is_ok()
        );
        let e = Scenario::parse(&format!(
            "name='x'\nsegments=[1,2]\nreceivers=[4]\nsizes=['1MiB']\n{tools}"
        ))
        .unwrap_err();
        assert!(format!("{e:#}").contains("their total"), "{e:#}");
        // No segments: no cascade.
        let e = Scenario::parse(&format!("name='x'\nreceivers=[3]\nsizes=['1MiB']\n{tools}"))
            .unwrap_err();
        assert!(format!("{e:#}").contains("needs `segments`"), "{e:#}");
        // Relays forward multicast: no TCP overlay; relay_args are the cascade's.
        let e = Scenario::parse(
            "name='x'\nsegments=[1,1]\nsizes=['1MiB']\n[[tools]]\nname='c'\nkind='cascade'\nprotocol='tcp-chain'\n",
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("multicast protocol"), "{e:#}");
        assert!(
            Scenario::parse(
                "name='x'\nreceivers=[1]\nsizes=['1MiB']\n[[tools]]\nname='r'\nkind='rmcast'\nrelay_args=['-v']\n",
            )
            .is_err()
        );
        assert!(
            Scenario::parse(
                "name='x'\nsegments=[1,0]\nsizes=['1MiB']\n[[tools]]\nname='c'\nkind='cascade'\n"
            )
            .is_err()
        );
        // A tree: both relays off segment 0.
        let tree = Scenario::parse(&format!(
            "name='x'\nsegments=[2,2,2]\nrelay_from=[0,0]\nsizes=['1MiB']\n{tools}"
        ))
        .unwrap();
        assert_eq!(tree.segment_layout().unwrap().unwrap().members_of(0), 4);
        assert!(
            Scenario::parse(&format!(
                "name='x'\nsegments=[2,2,2]\nrelay_from=[0,2]\nsizes=['1MiB']\n{tools}"
            ))
            .is_err()
        );
        assert!(
            Scenario::parse(
                "name='x'\nreceivers=[2]\nrelay_from=[0]\nsizes=['1MiB']\n[[tools]]\nname='a'\nkind='rmcast'\n"
            )
            .is_err()
        );
    }

    #[test]
    fn claims_name_a_tool_and_a_fraction() {
        let base = "name='x'\nreceivers=[1]\nsizes=['1MiB']\n[[tools]]\nname='a'\nkind='rmcast'\n";
        let ok = format!("{base}[[claims]]\ntext='t'\ntool='a'\nmin_fraction_of_rate=0.9\n");
        assert_eq!(Scenario::parse(&ok).unwrap().claims.len(), 1);
        assert!(
            Scenario::parse(&format!(
                "{base}[[claims]]\ntext='t'\ntool='b'\nmin_fraction_of_rate=0.9\n"
            ))
            .is_err()
        );
        assert!(
            Scenario::parse(&format!(
                "{base}[[claims]]\ntext='t'\ntool='a'\nmin_fraction_of_rate=1.5\n"
            ))
            .is_err()
        );
        // The scenario as the runner writes it (scenario.toml) reads back.
        let again = Scenario::parse(&toml::to_string(&Scenario::parse(&ok).unwrap()).unwrap());
        assert!(again.is_ok());
    }
}
