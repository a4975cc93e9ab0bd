//! URLs as `ccscope.targets.parse_url` reads them (http and https only, no credentials, 2,048
//! characters at most), and a redirect's Location joined to the URL it came from.

pub const MAX_URL_LENGTH: usize = 2048;

#[derive(Clone, Debug)]
pub struct Url {
    pub scheme: String, // "http" or "https"
    pub host: String,   // lower case, without brackets or a trailing dot
    pub port: u16,
    pub path: String, // path + query, ready for the request line
}

impl Url {
    pub fn default_port(&self) -> bool {
        self.port == 80 || self.port == 443
    }
}

/// The URL's parts, or why it is refused.
pub fn parse(url: &str) -> Result<Url, String> {
    if url.chars().count() > MAX_URL_LENGTH {
        return Err(format!("URL longer than {MAX_URL_LENGTH} characters"));
    }
    if url.chars().any(|c| (c as u32) < 0x21 || c as u32 == 0x7f) {
        return Err("URL contains whitespace or control characters".into());
    }
    let (scheme, rest) = match split_scheme(url) {
        Some((s, r)) => (s.to_ascii_lowercase(), r),
        None => ("".into(), url),
    };
    if scheme != "http" && scheme != "https" {
        let shown = split_scheme(url).map(|(s, _)| s).unwrap_or("");
        return Err(format!("unsupported scheme '{shown}' (use http or https)"));
    }
    let rest = rest.strip_prefix("//").unwrap_or("");
    let rest = rest.split('#').next().unwrap_or("");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (netloc, tail) = rest.split_at(end);
    let (path, query) = match tail.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (tail, None),
    };
    if netloc.contains('@') {
        return Err("URLs with credentials are not measured".into());
    }
    let (host, port) = if let Some(v6) = netloc.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or("unparseable URL: Invalid IPv6 URL")?;
        (h, after.strip_prefix(':'))
    } else {
        match netloc.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (netloc, None),
        }
    };
    let port = match port {
        None | Some("") => {
            if scheme == "https" {
                443
            } else {
                80
            }
        }
        Some(p) if p.bytes().all(|b| b.is_ascii_digit()) => match p.parse::<u32>() {
            Ok(0) => {
                if scheme == "https" {
                    443
                } else {
                    80
                }
            } // as parse_url's `port or default`
            Ok(n) if n <= 65535 => n as u16,
            _ => return Err("unparseable URL: Port out of range 0-65535".into()),
        },
        Some(p) => {
            return Err(format!(
                "unparseable URL: Port could not be cast to integer value as '{p}'"
            ))
        }
    };
    let host = host.to_ascii_lowercase();
    let host = host.trim_end_matches('.');
    if host.is_empty() {
        return Err("URL has no host".into());
    }
    let mut path = if path.is_empty() {
        "/".to_string()
    } else {
        path.to_string()
    };
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        path.push('?');
        path.push_str(q);
    }
    Ok(Url {
        scheme,
        host: host.to_string(),
        port,
        path,
    })
}

/// `scheme:rest` when the URL starts with a scheme (a letter, then letters, digits, + - .).
fn split_scheme(url: &str) -> Option<(&str, &str)> {
    let (s, r) = url.split_once(':')?;
    let mut b = s.bytes();
    let first_ok = b.next().is_some_and(|c| c.is_ascii_alphabetic());
    (first_ok && b.all(|c| c.is_ascii_alphanumeric() || b"+-.".contains(&c))).then_some((s, r))
}

/// A redirect's Location resolved against the URL it came from (RFC 3986 section 5.2), as
/// Python's urljoin does it (a fragment kept as given; the next hop's parse drops it).
pub fn join(base: &str, loc: &str) -> String {
    let (loc_part, frag) = match loc.split_once('#') {
        Some((l, f)) => (l, Some(f)),
        None => (loc, None),
    };
    let mut out = join_no_fragment(base, loc_part);
    if let Some(f) = frag {
        out.push('#');
        out.push_str(f);
    }
    out
}

fn join_no_fragment(base: &str, loc: &str) -> String {
    if split_scheme(loc).is_some() {
        return loc.to_string();
    }
    let (scheme, rest) = split_scheme(base).unwrap_or(("http", base));
    if let Some(net) = loc.strip_prefix("//") {
        return format!("{scheme}://{net}");
    }
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let rest = rest.split('#').next().unwrap_or("");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (netloc, tail) = rest.split_at(end);
    let base_path = tail.split('?').next().unwrap_or("");
    let loc = loc.split('#').next().unwrap_or("");
    let joined = if loc.is_empty() {
        tail.to_string()
    } else if loc.starts_with('/') {
        remove_dots(loc)
    } else if loc.starts_with('?') {
        format!("{base_path}{loc}")
    } else {
        let dir = match base_path.rfind('/') {
            Some(i) => &base_path[..=i],
            None => "/",
        };
        remove_dots(&format!("{dir}{loc}"))
    };
    format!("{scheme}://{netloc}{joined}")
}

fn remove_dots(p: &str) -> String {
    let (path, query) = match p.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (p, None),
    };
    let mut out: Vec<&str> = Vec::new();
    let segs: Vec<&str> = path.split('/').collect();
    for (i, s) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        match *s {
            "." => {
                if last {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let mut r = out.join("/");
    if !r.starts_with('/') {
        r.insert(0, '/');
    }
    if let Some(q) = query {
        r.push('?');
        r.push_str(q);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values are Python's (urllib.parse.urljoin, ccscope.targets.parse_url).
    #[test]
    fn joins_as_urljoin() {
        let cases = [
            ("http://a.example/b/c/d?q=1", "/abs", "http://a.example/abs"),
            (
                "http://a.example/b/c/d?q=1",
                "rel",
                "http://a.example/b/c/rel",
            ),
            (
                "http://a.example/b/c/d?q=1",
                "../up",
                "http://a.example/b/up",
            ),
            (
                "http://a.example/b/c/d?q=1",
                "./same",
                "http://a.example/b/c/same",
            ),
            (
                "http://a.example/b/c/d?q=1",
                "?only",
                "http://a.example/b/c/d?only",
            ),
            (
                "http://a.example/b/c/d?q=1",
                "//other.example/p",
                "http://other.example/p",
            ),
            (
                "http://a.example/b/c/d?q=1",
                "https://new.example/x",
                "https://new.example/x",
            ),
            (
                "http://a.example/b/c/d?q=1",
                "g;x?y#s",
                "http://a.example/b/c/g;x?y#s",
            ),
            (
                "http://a.example/b/c/d?q=1",
                "../../../../toohigh",
                "http://a.example/toohigh",
            ),
            (
                "http://a.example/b/c/d?q=1",
                "",
                "http://a.example/b/c/d?q=1",
            ),
            (
                "http://a.example/b/c/d?q=1",
                "#frag",
                "http://a.example/b/c/d?q=1#frag",
            ),
            (
                "http://a.example/b/c/d?q=1",
                "a/./b/../c",
                "http://a.example/b/c/a/c",
            ),
            (
                "https://x.example:8443/dir/file",
                "/abs",
                "https://x.example:8443/abs",
            ),
            (
                "https://x.example:8443/dir/file",
                "../up",
                "https://x.example:8443/up",
            ),
            (
                "https://x.example:8443/dir/file",
                "?only",
                "https://x.example:8443/dir/file?only",
            ),
            (
                "https://x.example:8443/dir/file",
                "//other.example/p",
                "https://other.example/p",
            ),
        ];
        for (base, loc, want) in cases {
            assert_eq!(join(base, loc), want, "{base} + {loc}");
        }
    }

    #[test]
    fn parses_as_parse_url() {
        let p = |u: &str| parse(u).map(|x| (x.scheme, x.host, x.port, x.path));
        assert_eq!(
            p("http://Example.COM./x?y=1#f"),
            Ok(("http".into(), "example.com".into(), 80, "/x?y=1".into()))
        );
        assert_eq!(
            p("https://[2001:db8::1]:8443/p"),
            Ok(("https".into(), "2001:db8::1".into(), 8443, "/p".into()))
        );
        assert_eq!(
            p("http://h:0/"),
            Ok(("http".into(), "h".into(), 80, "/".into()))
        );
        assert_eq!(
            p("HTTP://h/"),
            Ok(("http".into(), "h".into(), 80, "/".into()))
        );
        assert_eq!(
            p("http://h:/x"),
            Ok(("http".into(), "h".into(), 80, "/x".into()))
        );
        assert_eq!(
            p("http://h?x"),
            Ok(("http".into(), "h".into(), 80, "/?x".into()))
        );
        for bad in [
            "ftp://h/",
            "http://u:p@h/",
            "http://h:99999/",
            "http:///x",
            "http://h/ x",
            "h/x",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse(&format!("http://h/{}", "a".repeat(3000))).is_err());
    }
}
