//! Which addresses a row may make the dispatcher connect to.
//!
//! A row names its target, and a row can be written by a token, an import or a pull request.
//! Some addresses only the dispatcher can reach: loopback (its own `/metrics`, a local
//! database's HTTP port), private networks, link-local cloud metadata (`169.254.169.254`,
//! which hands out the machine's cloud credentials). Rows reach them only where the operator
//! allows (`serve --allow-egress loopback,private,…`); by default only public addresses.
//!
//! The check is made on the address actually connected to: the HTTP clients of the runners
//! resolve names through [`Resolver`], which drops every address the policy refuses, so a
//! name that resolves (or re-resolves) to a private address is refused too; an address
//! written in the URL is checked before the request ([`Egress::check_url`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// The kinds of address beyond the public internet a policy may allow, or a network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Egress {
    /// 127.0.0.0/8, ::1 (and 0.0.0.0, ::, which connect to this machine).
    pub loopback: bool,
    /// 10/8, 172.16/12, 192.168/16, 100.64/10 (shared), fc00::/7.
    pub private: bool,
    /// 169.254/16 (cloud metadata lives there), fe80::/10.
    pub link_local: bool,
    /// Networks allowed besides: (address, prefix length).
    pub networks: Vec<(IpAddr, u8)>,
}

/// What an address is, as far as the policy asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Public,
    Loopback,
    Private,
    LinkLocal,
    /// Multicast, broadcast, documentation, reserved: never a row's to reach.
    Other,
}

fn kind(ip: IpAddr) -> Kind {
    match ip {
        IpAddr::V4(v4) => kind_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => kind_v4(v4),
            None => kind_v6(v6),
        },
    }
}

fn kind_v4(ip: Ipv4Addr) -> Kind {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() || ip.is_unspecified() {
        Kind::Loopback
    } else if ip.is_private() || (a == 100 && (64..128).contains(&b)) {
        Kind::Private
    } else if ip.is_link_local() {
        Kind::LinkLocal
    } else if ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        || (a == 192 && b == 0)
        || (a == 198 && (18..20).contains(&b))
    {
        Kind::Other
    } else {
        Kind::Public
    }
}

fn kind_v6(ip: Ipv6Addr) -> Kind {
    let seg = ip.segments();
    let first = seg[0];
    let v4 = |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    // NAT64 (64:ff9b::/96), 6to4 (2002::/16) and IPv4-compatible (::a.b.c.d) addresses
    // reach the IPv4 address they carry.
    if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return kind_v4(v4(seg[6], seg[7]));
    }
    if first == 0x2002 {
        return kind_v4(v4(seg[1], seg[2]));
    }
    if seg[..6] == [0; 6] && !ip.is_loopback() && !ip.is_unspecified() {
        return kind_v4(v4(seg[6], seg[7]));
    }
    if first & 0xffc0 == 0xfec0 {
        return Kind::Other;
    }
    if ip.is_loopback() || ip.is_unspecified() {
        Kind::Loopback
    } else if first & 0xfe00 == 0xfc00 {
        Kind::Private
    } else if first & 0xffc0 == 0xfe80 {
        Kind::LinkLocal
    } else if ip.is_multicast() || first == 0x2001 && ip.segments()[1] == 0x0db8 {
        Kind::Other
    } else {
        Kind::Public
    }
}

fn in_network(ip: IpAddr, (net, prefix): (IpAddr, u8)) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(prefix.min(32)))
                .unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(prefix.min(128)))
                .unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

impl Egress {
    /// Loopback only: what tests of a dispatcher with a loopback upstream allow.
    pub fn loopback() -> Egress {
        Egress {
            loopback: true,
            ..Egress::default()
        }
    }

    /// Every kind of address a host may have (not multicast or reserved ones): for what the
    /// operator names itself, like the server `capdir import mcp` reaches.
    pub fn unrestricted() -> Egress {
        Egress {
            loopback: true,
            private: true,
            link_local: true,
            networks: Vec::new(),
        }
    }

    /// `loopback,private,link-local,10.1.0.0/16,…` (`none` allows nothing beyond public).
    pub fn parse(text: &str) -> Result<Egress, String> {
        let mut e = Egress::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "none" => {}
                "loopback" => e.loopback = true,
                "private" => e.private = true,
                "link-local" => e.link_local = true,
                net => {
                    let (addr, prefix) = net.split_once('/').unwrap_or((net, ""));
                    let addr: IpAddr = addr.parse().map_err(|_| {
                        format!("`{part}` is not loopback, private, link-local or a network like 10.1.0.0/16")
                    })?;
                    let max = if addr.is_ipv4() { 32 } else { 128 };
                    let prefix = if prefix.is_empty() {
                        max
                    } else {
                        prefix
                            .parse::<u8>()
                            .ok()
                            .filter(|p| *p <= max)
                            .ok_or_else(|| format!("`{part}` has a bad prefix length"))?
                    };
                    e.networks.push((addr, prefix));
                }
            }
        }
        Ok(e)
    }

    /// May a row's request connect to `ip`?
    pub fn allows(&self, ip: IpAddr) -> bool {
        if self.networks.iter().any(|n| in_network(ip, *n)) {
            return true;
        }
        match kind(ip) {
            Kind::Public => true,
            Kind::Loopback => self.loopback,
            Kind::Private => self.private,
            Kind::LinkLocal => self.link_local,
            Kind::Other => false,
        }
    }

    /// The refusal of a URL whose host is an address the policy refuses (`ERR:egress:refused`).
    /// Names are judged when they are resolved, by [`Resolver`].
    pub fn check_url(&self, url: &url::Url) -> Result<(), String> {
        let ip = match url.host() {
            Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
            Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
            _ => return Ok(()),
        };
        if self.allows(ip) {
            Ok(())
        } else {
            Err(refused(&ip.to_string()))
        }
    }
}

fn refused(what: &str) -> String {
    format!(
        "{what} is an address rows may not reach (loopback, private, link-local or reserved); the operator allows such addresses with --allow-egress"
    )
}

/// The error a resolution refused by the policy ends with; runners look for it to name the
/// failure `egress:refused`.
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// Whether `e` (a client's error) was a refusal of the egress policy, and its message.
pub fn refusal_in(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut at: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = at {
        if let Some(r) = err.downcast_ref::<Refused>() {
            return Some(r.0.clone());
        }
        at = err.source();
    }
    None
}

/// A DNS resolver for the runners' HTTP clients that keeps only the addresses the policy
/// allows: checked at every connection, so a name re-resolved to a private address is
/// refused too.
pub struct Resolver {
    pub egress: Egress,
}

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let egress = self.egress.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| egress.allows(a.ip()))
                .collect();
            if allowed.is_empty() && !found.is_empty() {
                let shown: Vec<String> = found.iter().map(|a| a.ip().to_string()).collect();
                let err: Box<dyn std::error::Error + Send + Sync> = Box::new(Refused(refused(
                    &format!("{host} resolves to {}, which", shown.join(", ")),
                )));
                return Err(err);
            }
            let addrs: reqwest::dns::Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

impl Resolver {
    pub fn shared(egress: &Egress) -> Arc<Resolver> {
        Arc::new(Resolver {
            egress: egress.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_public_addresses_by_default() {
        let e = Egress::default();
        for refused in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "::1",
            "::",
            "10.0.0.1",
            "172.16.5.4",
            "192.168.1.1",
            "100.64.0.1",
            "169.254.169.254",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "224.0.0.1",
            "255.255.255.255",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::1",
            "::7f00:1",
            "fec0::1",
        ] {
            assert!(!e.allows(ip(refused)), "{refused}");
        }
        for public in ["1.1.1.1", "140.82.112.3", "2606:4700::1111", "172.32.0.1"] {
            assert!(e.allows(ip(public)), "{public}");
        }
        let u = |s: &str| url::Url::parse(s).unwrap();
        assert!(
            e.check_url(&u("http://169.254.169.254/latest/meta-data/"))
                .is_err()
        );
        assert!(e.check_url(&u("http://[::ffff:7f00:1]/")).is_err());
        assert!(
            e.check_url(&u("http://0x7f000001/")).is_err(),
            "the parser's form"
        );
        assert!(
            e.check_url(&u("https://api.github.com/")).is_ok(),
            "names at resolution"
        );
    }

    #[test]
    fn the_operator_allows_what_it_names() {
        let e = Egress::parse("loopback, 10.1.0.0/16").unwrap();
        assert!(e.allows(ip("127.0.0.1")) && e.allows(ip("::1")));
        assert!(e.allows(ip("10.1.200.3")));
        assert!(!e.allows(ip("10.2.0.1")));
        assert!(!e.allows(ip("169.254.169.254")));
        assert!(Egress::parse("everything").is_err());
        assert!(Egress::parse("10.0.0.0/40").is_err());
        assert_eq!(Egress::parse("none").unwrap(), Egress::default());
    }

    #[tokio::test]
    async fn a_name_that_resolves_to_loopback_is_refused() {
        use reqwest::dns::Resolve;
        let r = Resolver {
            egress: Egress::default(),
        };
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        let e = r.resolve(name).await.err().expect("refused");
        assert!(refusal_in(e.as_ref()).is_some(), "{e}");
        let r = Resolver {
            egress: Egress::loopback(),
        };
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        assert!(r.resolve(name).await.is_ok());
    }
}
