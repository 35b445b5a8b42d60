//! Who is on the other end, and how much of the server one of them may hold. The client address
//! is the TCP peer, unless that peer is one of `--trusted-proxies`: then it is the address the
//! proxy passed on (`X-Forwarded-For`, else `Forwarded: for=`), read from the right and passing
//! over the trusted proxies in the chain, since anyone may write the left of it. Per-address caps
//! stand beside the global ones, so one client cannot take every connection slot; behind a
//! proxy they count forwarded addresses (the proxy itself is not capped at the TCP level).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::http::HeaderMap;
use ipnet::IpNet;
use parking_lot::Mutex;

/// The address a request is from, as [`TrustedProxies::client`] found it; an extension of every
/// request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// Proxies whose forwarding headers are believed: addresses or networks (`10.0.0.0/8`).
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// `entries` are addresses (`10.0.0.5`, `::1`) or networks (`10.0.0.0/8`).
    pub fn new(entries: &[String]) -> Result<TrustedProxies, String> {
        entries
            .iter()
            .map(|e| {
                let e = e.trim();
                e.parse::<IpNet>()
                    .or_else(|_| e.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("`{e}` is not an address or a network such as 10.0.0.0/8"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(TrustedProxies)
    }

    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The client of a request that came from `peer` with `headers`.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = canonical(peer);
        if !self.trusts(peer) {
            return peer;
        }
        let chain = forwarded_for(headers);
        // From the right: the nearest hop first; the first one not a trusted proxy is the client.
        chain
            .iter()
            .rev()
            .copied()
            .find(|ip| !self.trusts(*ip))
            .or_else(|| chain.first().copied())
            .unwrap_or(peer)
    }
}

/// An IPv4 address written as IPv6 (`::ffff:1.2.3.4`) is the IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The addresses of `X-Forwarded-For` (every header, in order), else of `Forwarded: for=`;
/// entries that are not addresses (`unknown`, obfuscated names) are left out.
fn forwarded_for(headers: &HeaderMap) -> Vec<IpAddr> {
    let parse = |s: &str| -> Option<IpAddr> {
        let s = s.trim().trim_matches('"');
        // `[v6]:port`, `[v6]`, `v4:port`, or a bare address.
        if let Some(rest) = s.strip_prefix('[') {
            return rest.split(']').next()?.parse().ok().map(canonical);
        }
        s.parse::<IpAddr>()
            .or_else(|_| s.parse::<SocketAddr>().map(|a| a.ip()))
            .ok()
            .map(canonical)
    };
    let xff: Vec<IpAddr> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(parse)
        .collect();
    if !xff.is_empty() {
        return xff;
    }
    headers
        .get_all("forwarded")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|element| {
            element.split(';').find_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                k.trim()
                    .eq_ignore_ascii_case("for")
                    .then(|| parse(v))
                    .flatten()
            })
        })
        .collect()
}

/// The client an address counts as for the per-address caps and shares: an IPv4 address
/// itself, an IPv6 address's /64 network (one host, or one home, is given a whole /64, so a
/// client could otherwise take a fresh address for each connection).
pub fn client_of(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

/// What each address holds now (connections, sockets), against a cap per address.
#[derive(Debug)]
pub struct PerPeer {
    max: usize,
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// One thing an address holds, given back when dropped.
#[derive(Debug)]
pub struct Held {
    ip: IpAddr,
    counts: Arc<PerPeer>,
}

impl PerPeer {
    pub fn new(max: usize) -> Arc<PerPeer> {
        Arc::new(PerPeer {
            max: max.max(1),
            held: Mutex::default(),
        })
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// One more for `ip` (for its client: see [`client_of`]), unless it holds the cap already.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Option<Held> {
        let ip = client_of(ip);
        let mut held = self.held.lock();
        let n = held.entry(ip).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(Held {
            ip,
            counts: self.clone(),
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.counts.held.lock();
        if let Some(n) = held.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, v.parse().unwrap());
        }
        map
    }

    #[test]
    fn ipv6_addresses_of_one_64_network_count_as_one_client() {
        let counts = PerPeer::new(2);
        let one: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let same_net: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other_net: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        let _a = counts.take(one).unwrap();
        let _b = counts.take(same_net).unwrap();
        assert!(counts.take(one).is_none(), "the /64 holds its cap");
        assert!(counts.take(other_net).is_some());
        // IPv4, also written as IPv6, counts by the address itself.
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(client_of(mapped), v4);
        assert_ne!(client_of("192.0.2.8".parse().unwrap()), client_of(v4));
    }

    #[test]
    fn forwarding_headers_count_only_from_trusted_proxies_read_from_the_right() {
        let proxies = TrustedProxies::new(&["10.0.0.0/8".into(), "::1".into()]).unwrap();
        let peer: IpAddr = "10.0.0.2".parse().unwrap();
        let spoofed = headers(&[("x-forwarded-for", "6.6.6.6, 203.0.113.7, 10.0.0.9")]);
        // The client is the first hop from the right that is not a trusted proxy.
        assert_eq!(
            proxies.client(peer, &spoofed),
            "203.0.113.7".parse::<IpAddr>().unwrap()
        );
        // From anyone else, the headers are ignored.
        let stranger: IpAddr = "198.51.100.1".parse().unwrap();
        assert_eq!(proxies.client(stranger, &spoofed), stranger);
        let forwarded = headers(&[(
            "forwarded",
            "for=192.0.2.60;proto=http, for=\"[2001:db8::1]:4711\"",
        )]);
        assert_eq!(
            proxies.client(peer, &forwarded),
            "2001:db8::1".parse::<IpAddr>().unwrap()
        );
        // Nothing forwarded: the proxy itself.
        assert_eq!(proxies.client(peer, &HeaderMap::new()), peer);
        assert!(TrustedProxies::new(&["not an address".into()]).is_err());
    }

    #[test]
    fn an_address_holds_at_most_its_cap_and_gets_room_back_as_it_lets_go() {
        let per = PerPeer::new(2);
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let a = per.take(ip).unwrap();
        let _b = per.take(ip).unwrap();
        assert!(per.take(ip).is_none());
        assert!(per.take("192.0.2.2".parse().unwrap()).is_some());
        drop(a);
        assert!(per.take(ip).is_some());
    }
}
