//! Reading a suite file: `[defaults]` merged into every experiment, the
//! quick variant applied, each experiment checked; and writing the
//! resolved suite back as TOML.

use super::validate::{check_name, validate};
use super::{Claim, Experiment, Series, Suite};
use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::path::Path;

/// The suite file's own fields (everything but `defaults` and `experiment`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    name: String,
    #[serde(default)]
    paper: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    notes: String,
}

/// Fields `[defaults]` and `[experiment.quick]` may not set.
const NOT_OVERRIDABLE: [&str; 4] = ["id", "series", "claim", "quick"];

impl Suite {
    /// Reads and checks a suite file; `quick` applies every `[experiment.quick]`.
    pub fn load(path: &Path, quick: bool) -> Result<Suite> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Suite::parse(&text, quick).with_context(|| format!("suite {}", path.display()))
    }

    /// Parses and checks suite text; `quick` applies every `[experiment.quick]`.
    pub fn parse(text: &str, quick: bool) -> Result<Suite> {
        let mut root: toml::Table = toml::from_str(text).context("invalid suite TOML")?;
        let defaults = match root.remove("defaults") {
            None => toml::Table::new(),
            Some(toml::Value::Table(t)) => t,
            Some(_) => bail!("`defaults` must be a table ([defaults])"),
        };
        for k in NOT_OVERRIDABLE {
            if defaults.contains_key(k) {
                bail!("[defaults] cannot set `{k}`");
            }
        }
        if defaults.contains_key("skip") {
            bail!("[defaults] cannot set `skip` (it belongs in [experiment.quick])");
        }
        let experiments = match root.remove("experiment") {
            Some(toml::Value::Array(a)) => a,
            Some(_) => bail!("`experiment` must be an array of tables ([[experiment]])"),
            None => bail!("a suite needs at least one [[experiment]]"),
        };
        let header: Header = toml::Value::Table(root)
            .try_into()
            .context("suite header (name, paper, title, notes)")?;
        check_name("suite name", &header.name)?;
        if experiments.is_empty() {
            bail!("a suite needs at least one [[experiment]]");
        }
        let mut out = Vec::new();
        let mut ids: Vec<String> = Vec::new();
        for (i, raw) in experiments.into_iter().enumerate() {
            let toml::Value::Table(mut table) = raw else {
                bail!("experiment #{} is not a table", i + 1);
            };
            let label = match table.get("id") {
                Some(toml::Value::String(s)) => format!("experiment `{s}`"),
                _ => format!("experiment #{}", i + 1),
            };
            let quick_table = match table.remove("quick") {
                None => None,
                Some(toml::Value::Table(t)) => Some(t),
                Some(_) => bail!("{label}: `quick` must be a table ([experiment.quick])"),
            };
            let mut skip = false;
            if let Some(q) = &quick_table {
                for k in NOT_OVERRIDABLE {
                    if q.contains_key(k) {
                        bail!("{label}: [experiment.quick] cannot set `{k}`");
                    }
                }
                match q.get("skip") {
                    None => {}
                    Some(toml::Value::Boolean(b)) => skip = *b,
                    Some(_) => bail!("{label}: quick.skip must be true or false"),
                }
            }
            let mut merged = defaults.clone();
            merged.extend(table);
            let full = resolve(&label, merged.clone())?;
            // The quick variant is checked whichever one runs.
            let quick_variant = match &quick_table {
                Some(q) if !skip => {
                    let mut m = merged;
                    m.extend(
                        q.iter()
                            .filter(|(k, _)| *k != "skip")
                            .map(|(k, v)| (k.clone(), v.clone())),
                    );
                    Some(resolve(&format!("{label} (quick)"), m)?)
                }
                _ => None,
            };
            if ids.contains(&full.id) {
                bail!("{label}: duplicate experiment id `{}`", full.id);
            }
            ids.push(full.id.clone());
            if quick && skip {
                continue;
            }
            out.push(if quick {
                quick_variant.unwrap_or(full)
            } else {
                full
            });
        }
        Ok(Suite {
            name: header.name,
            paper: header.paper,
            title: header.title,
            notes: header.notes,
            experiment: out,
        })
    }

    /// The suite as it ran, in the suite format (no defaults, no quick).
    pub fn to_toml(&self) -> Result<String> {
        Ok(toml::to_string(self)?)
    }

    /// Parses a suite written by [`Suite::to_toml`] (`DIR/suite.toml`).
    pub fn parse_resolved(text: &str) -> Result<Suite> {
        Suite::parse(text, false)
    }
}

/// Deserializes one merged experiment table with errors that name it, then checks it.
fn resolve(label: &str, table: toml::Table) -> Result<Experiment> {
    // Series and claims one by one first, so an error names which.
    if let Some(toml::Value::Array(series)) = table.get("series") {
        for (k, s) in series.iter().enumerate() {
            let name = s
                .get("name")
                .and_then(|n| n.as_str())
                .map_or(format!("#{}", k + 1), |n| format!("`{n}`"));
            s.clone()
                .try_into::<Series>()
                .map_err(|e| anyhow::anyhow!("{label}, series {name}: {}", e.message().trim()))?;
        }
    }
    if let Some(toml::Value::Array(claims)) = table.get("claim") {
        for (k, c) in claims.iter().enumerate() {
            c.clone().try_into::<Claim>().map_err(|e| {
                anyhow::anyhow!("{label}, claim #{}: {}", k + 1, e.message().trim())
            })?;
        }
    }
    if !table.contains_key("series") {
        bail!("{label}: no [[experiment.series]]");
    }
    let e = toml::Value::Table(table)
        .try_into::<Experiment>()
        .map_err(|e| anyhow::anyhow!("{label}: {}", e.message().trim()))?;
    validate(label, &e)?;
    Ok(e)
}
