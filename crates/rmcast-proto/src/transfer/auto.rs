//! `--protocol auto`: the data phase chosen once the group is known.
//!
//! A sender configured with [`SenderConfig::auto`] announces its session as
//! any other (the `Hello`'s protocol byte is provisional; receivers do not
//! read it) and, when registration closes, picks the data phase's protocol,
//! FEC and window from [`TABLE`] for the receivers that registered and the
//! object's size, keeping every setting the user fixed. The `Offer` then
//! carries the choice, as it would a hand-picked one. The choice is an
//! event ([`crate::SenderEvent::Chose`]) with its inputs and the row used,
//! so a driver can explain it (`rmcast send --explain`, `--json`).
//!
//! The table is measurement, not folklore: `docs/auto.md` has the sweep
//! that made it and its results. The loss rate is not known when the
//! choice is made (nothing has been sent yet), so each row is the setting
//! whose goodput stays closest to the best across the loss rates swept
//! (0, 0.1 % and 1 % per receiver): the smallest worst-case regret.

use super::sender::{Repair, SenderConfig};
use rmcast_wire::{FecShape, ProtocolId};
use std::fmt;

/// Which of the data phase's settings the user fixed (the CLI's flags that
/// were given): auto keeps those and chooses the rest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AutoConfig {
    /// Keep [`SenderConfig::window`].
    pub keep_window: bool,
    /// Keep [`SenderConfig::fec`] (`Some` or `None`).
    pub keep_fec: bool,
    /// Keep [`SenderConfig::poll_interval`].
    pub keep_poll_interval: bool,
}

/// One row of the decision table: the setting for groups from
/// `min_receivers` up (until the next row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// The smallest group this row is for.
    pub min_receivers: u16,
    /// The data phase's protocol.
    pub protocol: ProtocolId,
    /// Block FEC as (K, P, D): K data packets per block, P proactive
    /// parity packets, D blocks interleaved; `None` for repair by resending.
    pub fec: Option<(u16, u16, u16)>,
    /// Packets in flight.
    pub window: u32,
    /// Why, in a line: what the sweep showed for these groups.
    pub why: &'static str,
}

impl Row {
    /// The row's FEC shape.
    #[must_use]
    pub fn fec_shape(&self) -> Option<FecShape> {
        self.fec.map(|(k, p, d)| FecShape::new(k, p).with_depth(d))
    }
}

/// The decision table, by group size (ascending `min_receivers`; the last
/// row whose `min_receivers` the group reaches applies). Measured with
/// `rmcast-sim`'s sweep (`docs/auto.md`).
pub const TABLE: &[Row] = &[
    Row {
        min_receivers: 1,
        protocol: ProtocolId::NakPoll,
        fec: None,
        window: 1024,
        why: "up to 31 receivers FEC gained nothing in the real runtime on this \
              project's 2-core machine (the lab, 30 receivers, 2 % loss: 27.6-29.5 \
              Mbit/s against resends' 26.3-28.1; loopback, 8 receivers: 449-465 against \
              516 at 1 % loss), where the simulator, which gives every receiver its own \
              CPU, prefers it from 2 receivers; resends stay the default there. Window \
              1024: at 1 Gbit/s 512 packets last 6 ms, barely more than a repair's 5 ms \
              suppression, and the window runs dry under loss (0.75-0.93 of the best \
              with 8-30 receivers at 1 % loss in the simulator, where 1024 is within \
              0.2 % of it)",
    },
    Row {
        min_receivers: 32,
        protocol: ProtocolId::NakPoll,
        fec: Some((64, 2, 1)),
        window: 1024,
        why: "from about 60 receivers resends grow with the group until they cost more \
              than the object (0.24-0.54 of FEC's goodput at 1 % loss with 100 receivers, \
              in the simulator); parity repairs a different loss at every receiver, and \
              two parity packets sent with every block stay within 3 % of the best at \
              0-1 % loss (their cost on a clean LAN) where parity only on demand falls \
              to 0.75 at 0.1 % loss with 60-100 receivers. Window 1024 as in row 1 \
              (with parity it gains only up to 1 %, 32-200 receivers in the simulator). \
              Not interleaved: in the simulator 4 blocks interleaved gain 1.08-1.37 x \
              under bursts of loss at no cost under independent loss, but the real \
              runtime on this project's 2-core machine (40 receivers, loopback, 1 % \
              independent loss) reached 0.90 x",
    },
    Row {
        min_receivers: 300,
        protocol: ProtocolId::NakPoll,
        fec: Some((64, 2, 8)),
        window: 2048,
        why: "with hundreds of receivers a window of 512 waits on the whole group's \
              feedback (0.78-0.83 of the best at 1,000 receivers in the simulator); \
              2048 stays within 2.7 % of the best at 0-1 % loss (the parity's cost on a \
              clean LAN). 8 blocks interleaved: at 1,000 receivers and 1 % loss in bursts \
              of 8, 1.28 x the goodput of blocks of 64 alone and a quarter of the parity; \
              0.99 x with independent losses",
    },
    Row {
        min_receivers: 2000,
        protocol: ProtocolId::NakPoll,
        fec: Some((64, 2, 8)),
        window: 8192,
        why: "every poll gathers the whole group's acks: a window four times as large \
              polls a quarter as often. In the simulator (16 MiB, 1 Gbit/s) 8192 is at \
              least as good as 2048 at 0-1 % loss with 2,000 and 4,000 receivers, and \
              1.41 x at 4,000 and 1.64 x at 10,000 receivers with 1 % loss; below 2,000 \
              the two are within 1 %. Blocks as in the row before",
    },
    Row {
        min_receivers: 4000,
        protocol: ProtocolId::NakPoll,
        fec: Some((64, 3, 8)),
        window: 8192,
        why: "with thousands of receivers two parity packets per block leave too many \
              receivers short: each NAKs its interleaving group, and the NAKs bound the \
              sender. A third cuts them by 10 (4,000 receivers, 1 % loss, in the \
              simulator: 1.5 feedback packets per data packet against 4.0, goodput \
              1.05 x) at 1.1 % of goodput on a clean LAN; at 2,000 and 3,000 receivers \
              two stay within 0.2 % of the best and a third costs 1.2-1.3 %. Window as \
              in the row before",
    },
    Row {
        min_receivers: 8000,
        protocol: ProtocolId::NakPoll,
        fec: Some((64, 3, 8)),
        window: 16384,
        why: "a poll's answers come in rank slots of 2 microseconds: 16 ms at 8,000 receivers, \
              20 ms at 10,000, about what a window of 8192 has left after its poll \
              (1,664 packets, 19.6 ms at 1 Gbit/s), so the sender stalls at every poll; \
              16384 leaves 39 ms. In the simulator (1 Gbit/s) it is 1.05 x at 8,000 \
              receivers (32 MiB) and 1.10 x at 10,000 (64 MiB) with 1 % loss, 1.005 x \
              with 0.1 % and on a clean LAN at 8,000; at 6,000 it is 0.94 x with 1 % \
              loss, so the row starts at 8,000. Blocks as in the row before",
    },
];

/// What the choice was made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoInputs {
    /// Receivers that registered (the group the session runs with).
    pub receivers: u16,
    /// The object's length in bytes.
    pub object_bytes: u64,
    /// A resume or delta transfer (FEC cannot run with one).
    pub delta: bool,
    /// The sender's pacing rate, if one was set (bits per second).
    pub rate_bits_per_s: Option<u64>,
}

/// The data phase auto chose, with what it was chosen from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutoChoice {
    /// The inputs.
    pub inputs: AutoInputs,
    /// Index of the row used in [`TABLE`].
    pub row: usize,
    /// The protocol chosen.
    pub protocol: ProtocolId,
    /// FEC in effect (the row's, or the user's if kept).
    pub fec: Option<FecShape>,
    /// Window in effect.
    pub window: u32,
    /// Poll interval in effect (nak-poll; `None`: 85 % of the window).
    pub poll_interval: Option<u32>,
    /// Where the setting in effect is not the row's, and why (a setting
    /// the user fixed, FEC impossible with this transfer).
    pub notes: Vec<String>,
}

impl AutoChoice {
    /// The table's row that was used.
    #[must_use]
    pub fn row(&self) -> &'static Row {
        &TABLE[self.row]
    }

    /// Writes the choice into a configuration.
    pub(crate) fn apply(&self, config: &mut SenderConfig) {
        config.protocol = self.protocol;
        config.fec = self.fec;
        config.window = self.window;
        config.poll_interval = self.poll_interval;
    }
}

/// The row for a group of `receivers`.
#[must_use]
pub fn row_for(receivers: u16) -> usize {
    TABLE
        .iter()
        .rposition(|r| r.min_receivers <= receivers)
        .unwrap_or(0)
}

/// Chooses the data phase for `inputs` from [`TABLE`], keeping what `auto`
/// says the user fixed in `config` (the configuration as given).
#[must_use]
pub fn choose(inputs: AutoInputs, auto: AutoConfig, config: &SenderConfig) -> AutoChoice {
    let row = row_for(inputs.receivers);
    let r = &TABLE[row];
    let mut notes = Vec::new();
    let window = if auto.keep_window {
        if config.window != r.window {
            notes.push(format!("window {} as given", config.window));
        }
        config.window
    } else {
        r.window
    };
    let fec = if auto.keep_fec {
        if config.fec != r.fec_shape() {
            notes.push(format!("FEC {} as given", fec_text(config.fec)));
        }
        config.fec
    } else if config.repair != Repair::Selective && r.fec.is_some() {
        notes.push("no FEC: Go-back-N repair resends data, as given".into());
        None
    } else if inputs.delta && r.fec.is_some() {
        notes.push("no FEC: a resume or delta transfer sends only what receivers lack".into());
        None
    } else {
        r.fec_shape()
            .filter(|f| u32::from(f.data) <= window)
            .map(|f| {
                // Interleaving wants two groups in the window: with a
                // smaller window given, fewer blocks interleaved.
                let fits = (window / (2 * u32::from(f.data))).max(1);
                let depth = u32::from(f.depth).min(fits) as u16;
                if depth < f.depth {
                    notes.push(format!(
                        "FEC interleaves {depth} blocks: the window of {window} holds two \
                         groups of that many"
                    ));
                }
                f.with_depth(depth)
            })
            .or_else(|| {
                if r.fec.is_some() {
                    notes.push(format!(
                        "no FEC: the window of {window} is smaller than a block"
                    ));
                }
                None
            })
    };
    let poll_interval = if auto.keep_poll_interval {
        if config.poll_interval.is_some() {
            notes.push("poll interval as given".into());
        }
        config.poll_interval
    } else {
        None
    };
    AutoChoice {
        inputs,
        row,
        protocol: r.protocol,
        fec,
        window,
        poll_interval,
        notes,
    }
}

/// `64:0`, or `off`.
#[must_use]
pub fn fec_text(fec: Option<FecShape>) -> String {
    match fec {
        Some(f) => f.setting(),
        None => "off".into(),
    }
}

impl fmt::Display for AutoChoice {
    /// `auto: 30 receivers, 16777216 bytes, unpaced -> row 2 (2+ receivers):
    /// nak-poll, FEC 64:0, window 1024 (why ...)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inputs;
        let r = self.row();
        write!(
            f,
            "auto: {} receiver{}, {} bytes",
            i.receivers,
            plural(i.receivers),
            i.object_bytes
        )?;
        match i.rate_bits_per_s {
            Some(b) => write!(f, ", paced at {:.1} Mbit/s", b as f64 / 1e6)?,
            None => write!(f, ", unpaced")?,
        }
        if i.delta {
            write!(f, ", resume/delta")?;
        }
        let upto = match TABLE.get(self.row + 1) {
            Some(n) if n.min_receivers - 1 == r.min_receivers => {
                format!("{} receiver{}", r.min_receivers, plural(r.min_receivers))
            }
            Some(n) => format!("{}-{} receivers", r.min_receivers, n.min_receivers - 1),
            None => format!("{}+ receivers", r.min_receivers),
        };
        write!(
            f,
            " -> row {} ({upto}): {}, FEC {}, window {}",
            self.row + 1,
            self.protocol.cli_name(),
            fec_text(self.fec),
            self.window
        )?;
        if let Some(p) = self.poll_interval {
            write!(f, ", poll interval {p}")?;
        }
        for n in &self.notes {
            write!(f, "; {n}")?;
        }
        write!(f, ". Why: {}", r.why)
    }
}

fn plural(n: u16) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(receivers: u16) -> AutoInputs {
        AutoInputs {
            receivers,
            object_bytes: 16 << 20,
            delta: false,
            rate_bits_per_s: None,
        }
    }

    #[test]
    fn the_table_is_ordered_and_starts_at_one_receiver() {
        assert_eq!(TABLE[0].min_receivers, 1);
        for w in TABLE.windows(2) {
            assert!(w[0].min_receivers < w[1].min_receivers, "{w:?}");
        }
    }

    #[test]
    fn every_row_is_a_valid_configuration_at_its_ends() {
        // Each row's setting passes the sender's own checks for the
        // smallest and the largest group it serves, sealed or not.
        for (i, r) in TABLE.iter().enumerate() {
            let last = TABLE
                .get(i + 1)
                .map_or(rmcast_wire::MAX_RECEIVERS, |n| n.min_receivers - 1);
            for n in [r.min_receivers, last] {
                let mut c = SenderConfig {
                    receivers: n,
                    ..SenderConfig::default()
                };
                let choice = choose(inputs(n), AutoConfig::default(), &c);
                assert_eq!(choice.row, i);
                assert!(choice.notes.is_empty(), "{:?}", choice.notes);
                choice.apply(&mut c);
                if r.protocol == ProtocolId::Ring && c.window <= u32::from(n) {
                    continue;
                }
                c.validate()
                    .unwrap_or_else(|e| panic!("row {i} at {n} receivers: {e}"));
            }
        }
    }

    #[test]
    fn every_group_size_finds_its_row() {
        assert_eq!(row_for(0), 0);
        assert_eq!(row_for(1), 0);
        for n in [
            2,
            8,
            30,
            31,
            32,
            299,
            300,
            1000,
            1999,
            2000,
            3999,
            4000,
            7999,
            8000,
            u16::MAX,
        ] {
            let i = row_for(n);
            assert!(TABLE[i].min_receivers <= n);
            assert!(TABLE.get(i + 1).is_none_or(|r| r.min_receivers > n));
        }
    }

    #[test]
    fn a_window_given_smaller_than_two_groups_interleaves_fewer_blocks() {
        let keep = AutoConfig {
            keep_window: true,
            ..AutoConfig::default()
        };
        let row = TABLE[row_for(1000)].fec_shape().expect("FEC at 1,000");
        assert_eq!(row.depth, 8);
        for (window, depth, noted) in [
            (2048, 8, false),
            (1024, 8, false),
            (512, 4, true),
            (200, 1, true),
        ] {
            let c = SenderConfig {
                window,
                ..SenderConfig::default()
            };
            let ch = choose(inputs(1000), keep, &c);
            assert_eq!(ch.fec, Some(row.with_depth(depth)), "window {window}");
            let said = ch.notes.iter().any(|n| n.contains("interleaves"));
            assert_eq!(said, noted, "window {window}: {:?}", ch.notes);
            // What auto chose, the sender accepts.
            let mut run = c.clone();
            ch.apply(&mut run);
            run.validate().expect("a valid choice");
        }
    }

    #[test]
    fn settings_the_user_fixed_are_kept_and_said() {
        let c = SenderConfig {
            window: 2048,
            fec: Some(FecShape::new(128, 4)),
            poll_interval: Some(100),
            ..SenderConfig::default()
        };
        let all = AutoConfig {
            keep_window: true,
            keep_fec: true,
            keep_poll_interval: true,
        };
        let ch = choose(inputs(30), all, &c);
        assert_eq!(ch.window, 2048);
        assert_eq!(ch.fec, Some(FecShape::new(128, 4)));
        assert_eq!(ch.poll_interval, Some(100));
        assert_eq!(ch.notes.len(), 3, "{:?}", ch.notes);
        let off = SenderConfig::default();
        let ch = choose(inputs(40), AutoConfig::default(), &off);
        assert_eq!(ch.fec, TABLE[row_for(40)].fec_shape());
        assert!(ch.fec.is_some());
        let kept_off = choose(
            inputs(40),
            AutoConfig {
                keep_fec: true,
                ..AutoConfig::default()
            },
            &off,
        );
        assert_eq!(kept_off.fec, None);
    }

    #[test]
    fn no_fec_where_it_cannot_run() {
        let c = SenderConfig::default();
        let delta = choose(
            AutoInputs {
                delta: true,
                ..inputs(40)
            },
            AutoConfig::default(),
            &c,
        );
        assert_eq!(delta.fec, None);
        assert!(delta.notes[0].contains("delta"), "{:?}", delta.notes);
        let small = SenderConfig {
            window: 16,
            ..SenderConfig::default()
        };
        let ch = choose(
            inputs(40),
            AutoConfig {
                keep_window: true,
                ..AutoConfig::default()
            },
            &small,
        );
        assert_eq!(ch.fec, None);
        assert_eq!(ch.window, 16);
        let gbn = SenderConfig {
            repair: Repair::GoBackN,
            ..SenderConfig::default()
        };
        let ch = choose(inputs(40), AutoConfig::default(), &gbn);
        assert_eq!(ch.fec, None);
        assert!(ch.notes[0].contains("Go-back-N"), "{:?}", ch.notes);
    }

    #[test]
    fn the_explanation_names_inputs_row_and_reason() {
        let ch = choose(inputs(30), AutoConfig::default(), &SenderConfig::default());
        let text = ch.to_string();
        assert!(text.starts_with("auto: 30 receivers, 16777216 bytes, unpaced -> row 1 "));
        assert!(text.contains("nak-poll, FEC off, window 1024"), "{text}");
        let big = choose(inputs(40), AutoConfig::default(), &SenderConfig::default());
        assert!(
            big.to_string()
                .contains("(32-299 receivers): nak-poll, FEC 64:2, window 1024"),
            "{big}"
        );
        assert!(text.contains(TABLE[ch.row].why), "{text}");
        let one = choose(inputs(1), AutoConfig::default(), &SenderConfig::default());
        assert!(one.to_string().contains("auto: 1 receiver, "), "{one}");
    }
}
