//! The ssh testbed's inventory: the hosts and relay hosts a run may use,
//! with `[defaults]` applied and every entry checked (docs/lab.md, "ssh";
//! `lab/inventory.example.toml`).

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// An inventory file: `[defaults]` for every host, then `[[hosts]]`, the
/// sender first. See docs/lab.md.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    /// Settings every host takes unless it gives its own.
    #[serde(default)]
    pub defaults: HostSettings,
    /// The hosts, h0 (the sender) first.
    #[serde(default)]
    pub hosts: Vec<InventoryHost>,
    /// Relay hosts between segments (segmented scenarios only).
    #[serde(default)]
    pub relays: Vec<InventoryRelay>,
}

/// A relay host of the inventory: one interface on the segment it
/// receives from (`iface`, `up_address`), one on the segment it feeds.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InventoryRelay {
    /// Its name in the report.
    pub name: String,
    /// What ssh connects to.
    pub address: String,
    /// Its IPv4 address on the segment it receives from, on `iface`
    /// (default: `address`, which must then be one).
    pub up_address: Option<Ipv4Addr>,
    /// Its IPv4 address on the segment it feeds.
    pub down_address: Ipv4Addr,
    /// The interface that address is on.
    pub down_iface: String,
    /// The segment it feeds: relay k of the scenario feeds segment k (≥ 1).
    pub to_segment: usize,
    /// The segment it receives from, if the inventory says (checked
    /// against the scenario's `relay_from`).
    pub from_segment: Option<usize>,
    /// Anything of `[defaults]`, for this relay (`iface` is its upstream one).
    #[serde(flatten)]
    pub settings: HostSettings,
}

/// Settings a host may give or take from `[defaults]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSettings {
    /// Login user (default: ssh's own choice).
    pub user: Option<String>,
    /// sshd's port (default 22).
    pub port: Option<u16>,
    /// Private key file (default: ssh's own keys and agent).
    pub key: Option<PathBuf>,
    /// The directory the lab may write under (absolute).
    pub workdir: Option<PathBuf>,
    /// The interface the tools use (`eth0`).
    pub iface: Option<String>,
    /// More `ssh` options (`["-o", "UserKnownHostsFile=…"]`).
    pub ssh_options: Option<Vec<String>>,
}

/// One host of the inventory.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InventoryHost {
    /// Its name in the report.
    pub name: String,
    /// What ssh connects to: a name or an address.
    pub address: String,
    /// Its IPv4 address on the tools' interface (default: `address`, which
    /// must then be one).
    pub data_address: Option<Ipv4Addr>,
    /// The segment it sits on, for segmented scenarios (default 0, the
    /// sender's).
    #[serde(default)]
    pub segment: usize,
    /// Anything of `[defaults]`, for this host.
    #[serde(flatten)]
    pub settings: HostSettings,
}

/// A host as the testbed uses it: the inventory's settings resolved.
#[derive(Clone, Debug)]
pub struct SshHost {
    /// The inventory's name.
    pub name: String,
    /// What ssh connects to.
    pub address: String,
    /// Address on the tools' interface.
    pub data_address: Ipv4Addr,
    /// Interface name.
    pub iface: String,
    /// Login user.
    pub user: Option<String>,
    /// Port.
    pub port: u16,
    /// Key file.
    pub key: Option<PathBuf>,
    /// Work directory.
    pub workdir: PathBuf,
    /// More ssh options.
    pub options: Vec<String>,
    /// Its segment (a relay: the one it feeds).
    pub segment: usize,
    /// A relay's interface and address on the segment it feeds.
    pub down: Option<(String, Ipv4Addr)>,
    /// A relay's upstream segment, if the inventory gave it.
    pub from_segment: Option<usize>,
}

impl SshHost {
    /// Its interfaces and the address each must hold.
    pub(super) fn interfaces(&self) -> Vec<(&str, Ipv4Addr)> {
        let mut v = vec![(self.iface.as_str(), self.data_address)];
        if let Some((i, a)) = &self.down {
            v.push((i.as_str(), *a));
        }
        v
    }
}

/// An inventory with its defaults applied and checked.
#[derive(Clone, Debug)]
pub struct Hosts {
    /// The hosts, in the inventory's order.
    pub hosts: Vec<SshHost>,
    /// The relay hosts.
    pub relays: Vec<SshHost>,
}

impl Inventory {
    /// Reads and checks an inventory file.
    pub fn load(path: &Path) -> Result<Hosts> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the inventory {}", path.display()))?;
        let inv: Inventory =
            toml::from_str(&text).with_context(|| format!("inventory {}", path.display()))?;
        inv.resolve()
            .with_context(|| format!("inventory {}", path.display()))
    }

    /// Every host and relay with its defaults applied, checked.
    pub fn resolve(&self) -> Result<Hosts> {
        if self.hosts.is_empty() {
            bail!("no [[hosts]]: give the sender first, then one host per receiver");
        }
        let mut names = HashSet::new();
        let mut hosts = Vec::new();
        for (i, h) in self.hosts.iter().enumerate() {
            let what = format!("host {i} ({:?})", h.name);
            let mut r = self.resolve_one(
                &what,
                &h.name,
                &h.address,
                h.data_address,
                &h.settings,
                &mut names,
            )?;
            r.segment = h.segment;
            hosts.push(r);
        }
        if hosts[0].segment != 0 {
            bail!(
                "host 0 ({:?}) sends, so it sits on segment 0",
                hosts[0].name
            );
        }
        let mut relays: Vec<SshHost> = Vec::new();
        for (k, r) in self.relays.iter().enumerate() {
            let what = format!("relay {k} ({:?})", r.name);
            let mut h = self.resolve_one(
                &what,
                &r.name,
                &r.address,
                r.up_address,
                &r.settings,
                &mut names,
            )?;
            if r.to_segment == 0 {
                bail!("{what}: to_segment is the segment it feeds, 1 or more");
            }
            if let Some(other) = relays.iter().find(|o| o.segment == r.to_segment) {
                bail!(
                    "{what}: {:?} already feeds segment {}",
                    other.name,
                    r.to_segment
                );
            }
            if r.from_segment.is_some_and(|f| f >= r.to_segment) {
                bail!("{what}: from_segment must come before to_segment");
            }
            if r.down_iface.is_empty() || r.down_iface.contains(['/', ' ']) {
                bail!(
                    "{what}: down_iface {:?} is not an interface name",
                    r.down_iface
                );
            }
            h.segment = r.to_segment;
            h.down = Some((r.down_iface.clone(), r.down_address));
            h.from_segment = r.from_segment;
            relays.push(h);
        }
        Ok(Hosts { hosts, relays })
    }

    /// One entry with its defaults applied, checked.
    fn resolve_one(
        &self,
        what: &str,
        name: &str,
        address: &str,
        data_address: Option<Ipv4Addr>,
        s: &HostSettings,
        names: &mut HashSet<String>,
    ) -> Result<SshHost> {
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_graphic()) {
            bail!("{what}: a name is one word of printable characters");
        }
        if !names.insert(name.to_string()) {
            bail!("{what}: the name is given twice");
        }
        if address.is_empty() || address.starts_with('-') || address.contains(char::is_whitespace) {
            bail!("{what}: address {address:?} is not a host name or address");
        }
        let d = &self.defaults;
        let data_address = match data_address {
            Some(a) => a,
            None => address.parse().map_err(|_| {
                anyhow::anyhow!(
                    "{what}: address {address:?} is a name, so give data_address (its IPv4 address on the tools' interface; up_address for a relay)"
                )
            })?,
        };
        let iface: String = pick(&s.iface, &d.iface).ok_or_else(|| {
            anyhow::anyhow!("{what}: no iface (the interface the tools use, e.g. \"eth0\"; in [defaults] or the host)")
        })?;
        let workdir: PathBuf = pick(&s.workdir, &d.workdir).ok_or_else(|| {
            anyhow::anyhow!("{what}: no workdir (an absolute directory the lab may write under; in [defaults] or the host)")
        })?;
        if !workdir.is_absolute() || workdir.parent().is_none() {
            bail!(
                "{what}: workdir {} must be an absolute directory below /",
                workdir.display()
            );
        }
        let user: Option<String> = pick(&s.user, &d.user);
        if user
            .as_deref()
            .is_some_and(|u| u.is_empty() || u.starts_with('-') || u.contains(['@', ' ']))
        {
            bail!("{what}: user {user:?} is not a login name");
        }
        let key: Option<PathBuf> = pick(&s.key, &d.key);
        if let Some(k) = &key
            && std::fs::File::open(k).is_err()
        {
            bail!("{what}: cannot read the key {}", k.display());
        }
        Ok(SshHost {
            name: name.to_string(),
            address: address.to_string(),
            data_address,
            iface,
            user,
            port: pick(&s.port, &d.port).unwrap_or(22),
            key,
            workdir,
            options: pick(&s.ssh_options, &d.ssh_options).unwrap_or_default(),
            segment: 0,
            down: None,
            from_segment: None,
        })
    }
}

/// A host's own setting, else the default's.
fn pick<T: Clone>(own: &Option<T>, default: &Option<T>) -> Option<T> {
    own.clone().or_else(|| default.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(text: &str) -> Result<Vec<SshHost>> {
        toml::from_str::<Inventory>(text)
            .map_err(anyhow::Error::from)
            .and_then(|i| i.resolve())
            .map(|h| h.hosts)
    }

    #[test]
    fn defaults_apply_and_hosts_override() {
        let h = inv(r#"
            [defaults]
            user = "lab"
            workdir = "/var/tmp/lab"
            iface = "eth0"
            [[hosts]]
            name = "a"
            address = "10.0.0.1"
            [[hosts]]
            name = "b"
            address = "node-b"
            data_address = "10.0.0.2"
            iface = "ens5"
            port = 2222
        "#)
        .unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].user.as_deref(), Some("lab"));
        assert_eq!(h[0].data_address, Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(h[0].port, 22);
        assert_eq!(h[1].iface, "ens5");
        assert_eq!(h[1].port, 2222);
        assert_eq!(h[1].data_address, Ipv4Addr::new(10, 0, 0, 2));
    }

    #[test]
    fn bad_inventories_say_what_is_wrong() {
        let base = "[defaults]\nworkdir = \"/w\"\niface = \"eth0\"\n";
        let cases = [
            ("", "no [[hosts]]"),
            (
                "[[hosts]]\nname = \"a\"\naddress = \"n\"\n",
                "give data_address",
            ),
            (
                "[[hosts]]\nname = \"a\"\naddress = \"10.0.0.1\"\n[[hosts]]\nname = \"a\"\naddress = \"10.0.0.2\"\n",
                "given twice",
            ),
            (
                "[[hosts]]\nname = \"a\"\naddress = \"10.0.0.1\"\nworkdir = \"rel\"\n",
                "absolute",
            ),
            (
                "[[hosts]]\nname = \"a\"\naddress = \"-oProxyCommand=x\"\n",
                "not a host name",
            ),
            (
                "[[hosts]]\nname = \"a\"\naddress = \"10.0.0.1\"\nkey = \"/nonexistent/key\"\n",
                "cannot read the key",
            ),
            (
                "[[hosts]]\nname = \"a\"\naddress = \"10.0.0.1\"\nsurprise = 1\n",
                "unknown field",
            ),
        ];
        for (text, want) in cases {
            let err = format!("{:#}", inv(&format!("{base}{text}")).unwrap_err());
            assert!(err.contains(want), "{text:?}: {err}");
        }
        let err = format!(
            "{:#}",
            inv("[[hosts]]\nname = \"a\"\naddress = \"10.0.0.1\"\n").unwrap_err()
        );
        assert!(err.contains("no iface"), "{err}");
    }

    #[test]
    fn the_example_inventory_reads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/inventory.example.toml");
        let mut inv: Inventory = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        // Its key is the user's, not this machine's.
        inv.defaults.key = None;
        let h = inv.resolve().unwrap().hosts;
        assert_eq!(h.len(), 3);
        assert_eq!(h[1].data_address, Ipv4Addr::new(10, 1, 0, 11));
        assert_eq!(h[1].address, "node1.cluster");
        assert_eq!(h[2].iface, "ens5");
        assert_eq!(h[0].workdir, Path::new("/var/tmp/rmcast-lab"));
    }
}
