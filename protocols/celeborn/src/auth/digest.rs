//! DIGEST-MD5 (RFC 2831), the server's side, as Celeborn's clients speak it
//! through the JDK's SASL client: QOP `auth` only (no security layer after
//! the handshake), one realm `default`, digest-uri `null/default` (Java's
//! `protocol + "/" + serverName` with a null protocol), username =
//! Base64(appId), password = Base64(the secret's bytes as registered).
//!
//! Two round trips: the client's empty first token gets [`Challenge::token`];
//! its digest-response goes to [`Challenge::verify`], whose `rspauth` token
//! ends the exchange. Validation follows the JDK server's order
//! (`DigestMD5Server.validateClientResponse`), so clients see the failures
//! they would see from a JVM server.

use std::collections::HashMap;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use md5::{Digest, Md5};
use switchyard_storage::secret::constant_time_eq;

pub const REALM: &str = "default";
pub const DIGEST_URI: &str = "null/default";
/// The JDK server's bound on a digest-response.
const MAX_RESPONSE: usize = 4096;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DigestError {
    #[error("DIGEST-MD5: response of {0} bytes exceeds 4096")]
    TooLong(usize),
    #[error("DIGEST-MD5: malformed response: {0}")]
    Malformed(String),
    #[error("DIGEST-MD5: duplicate directive {0}")]
    Duplicate(String),
    #[error("DIGEST-MD5: missing {0}")]
    Missing(&'static str),
    #[error("DIGEST-MD5: {what} {got:?} not accepted")]
    Refused { what: &'static str, got: String },
    #[error("DIGEST-MD5: nonce does not match")]
    Nonce,
    #[error("DIGEST-MD5: username is not Base64 of an application id")]
    Username,
    /// The JDK server's text for an application with no secret.
    #[error("Registration information not found for {0}")]
    UnknownApp(String),
    /// The JDK server's text for a wrong digest (wrong secret).
    #[error("DIGEST-MD5: digest response format violation. Mismatched response.")]
    Mismatch,
}

/// The application a verified response authenticated, and the final token.
#[derive(Debug, PartialEq, Eq)]
pub struct Authenticated {
    pub app_id: String,
    /// `rspauth=<32 hex>`, the reply that completes the exchange.
    pub rspauth: Vec<u8>,
}

/// One connection's exchange: the nonce it was challenged with.
#[derive(Debug, Clone)]
pub struct Challenge {
    nonce: String,
}

impl Default for Challenge {
    fn default() -> Self {
        Self::new()
    }
}

impl Challenge {
    /// A fresh nonce: 30 random bytes (a CSPRNG's), Base64, 40 characters,
    /// as long as the JDK's.
    pub fn new() -> Challenge {
        let bytes: [u8; 30] = rand::random();
        Challenge {
            nonce: B64.encode(bytes),
        }
    }

    pub fn with_nonce(nonce: &str) -> Challenge {
        Challenge {
            nonce: nonce.to_string(),
        }
    }

    /// The digest-challenge, byte for byte what the JDK server sends for
    /// QOP `auth` and one realm (the client requires `algorithm=md5-sess`
    /// and, with several realms, would fail on Celeborn's callbacks).
    pub fn token(&self) -> Vec<u8> {
        format!(
            "realm=\"{REALM}\",nonce=\"{}\",qop=\"auth\",charset=utf-8,algorithm=md5-sess",
            self.nonce
        )
        .into_bytes()
    }

    /// The application id a digest-response names (its `username`, Base64
    /// of the id), if it parses; what to look a secret up by before
    /// [`Challenge::verify`].
    pub fn app_id(response: &[u8]) -> Option<String> {
        if response.len() > MAX_RESPONSE {
            return None;
        }
        let text = std::str::from_utf8(response).ok()?;
        let username = parse_directives(text).ok()?.remove("username")?;
        app_id_of(&username)
    }

    /// Checks a digest-response. `secret_of` gives the registered secret of
    /// an application id (its bytes as registered), or None.
    pub fn verify(
        &self,
        response: &[u8],
        secret_of: impl FnOnce(&str) -> Option<Vec<u8>>,
    ) -> Result<Authenticated, DigestError> {
        if response.len() > MAX_RESPONSE {
            return Err(DigestError::TooLong(response.len()));
        }
        let text = std::str::from_utf8(response)
            .map_err(|_| DigestError::Malformed("not UTF-8".into()))?;
        let d = parse_directives(text)?;
        let get = |k: &str| d.get(k).map(String::as_str);
        if let Some(charset) = get("charset") {
            if !charset.eq_ignore_ascii_case("utf-8") {
                return Err(refused("charset", charset));
            }
        }
        if let Some(maxbuf) = get("maxbuf") {
            maxbuf
                .parse::<u32>()
                .map_err(|_| refused("maxbuf", maxbuf))?;
        }
        let username = get("username").ok_or(DigestError::Missing("username"))?;
        let realm = get("realm").unwrap_or("");
        if realm != REALM {
            return Err(refused("realm", realm));
        }
        let nonce = get("nonce").ok_or(DigestError::Missing("nonce"))?;
        if !constant_time_eq(nonce.as_bytes(), self.nonce.as_bytes()) {
            return Err(DigestError::Nonce);
        }
        let cnonce = get("cnonce").ok_or(DigestError::Missing("cnonce"))?;
        // The JDK client sends `nc`; RFC 2831's table calls it nonce-count.
        let nc = get("nc")
            .or_else(|| get("nonce-count"))
            .unwrap_or("00000001");
        if u32::from_str_radix(nc, 16) != Ok(1) {
            return Err(refused("nonce count", nc));
        }
        let qop = get("qop").unwrap_or("auth");
        if qop != "auth" {
            return Err(refused("qop", qop));
        }
        let uri = get("digest-uri").ok_or(DigestError::Missing("digest-uri"))?;
        if !uri.eq_ignore_ascii_case(DIGEST_URI) {
            return Err(refused("digest-uri", uri));
        }
        let sent = get("response").ok_or(DigestError::Missing("response"))?;
        if let Some(authzid) = get("authzid") {
            if authzid != username {
                return Err(refused("authzid", authzid));
            }
        }
        let app_id = app_id_of(username).ok_or(DigestError::Username)?;
        let secret = secret_of(&app_id).ok_or_else(|| DigestError::UnknownApp(app_id.clone()))?;
        let password = B64.encode(secret);
        let ha1 = ha1(username, &password, nonce, cnonce);
        let expected = response_value(&ha1, nonce, nc, cnonce, "AUTHENTICATE", uri);
        if !constant_time_eq(expected.as_bytes(), sent.as_bytes()) {
            return Err(DigestError::Mismatch);
        }
        let rspauth = response_value(&ha1, nonce, nc, cnonce, "", uri);
        Ok(Authenticated {
            app_id,
            rspauth: format!("rspauth={rspauth}").into_bytes(),
        })
    }
}

/// The client's side, as the JDK's client answers a challenge with
/// Celeborn's parameters (for Switchyard's own client and tests): the
/// digest-response, and the `rspauth` token the server must send back.
pub fn client_response(
    app: &str,
    secret: &[u8],
    challenge: &[u8],
) -> Result<(Vec<u8>, Vec<u8>), DigestError> {
    let text = std::str::from_utf8(challenge)
        .map_err(|_| DigestError::Malformed("challenge is not UTF-8".into()))?;
    let d = parse_directives(text)?;
    let nonce = d.get("nonce").ok_or(DigestError::Missing("nonce"))?;
    let cnonce = B64.encode(rand::random::<[u8; 30]>());
    let user = B64.encode(app);
    let ha1 = ha1(&user, &B64.encode(secret), nonce, &cnonce);
    let response = response_value(&ha1, nonce, "00000001", &cnonce, "AUTHENTICATE", DIGEST_URI);
    let rspauth = response_value(&ha1, nonce, "00000001", &cnonce, "", DIGEST_URI);
    let line = format!(
        "charset=utf-8,username=\"{user}\",realm=\"{REALM}\",nonce=\"{nonce}\",nc=00000001,cnonce=\"{cnonce}\",digest-uri=\"{DIGEST_URI}\",maxbuf=65536,response={response},qop=auth"
    );
    Ok((line.into_bytes(), format!("rspauth={rspauth}").into_bytes()))
}

fn refused(what: &'static str, got: &str) -> DigestError {
    DigestError::Refused {
        what,
        got: got.chars().take(64).collect(),
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(32), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// HA1 for md5-sess without authzid (Celeborn sends none):
/// MD5(MD5(user:realm:pass) ":" nonce ":" cnonce), as lowercase hex.
fn ha1(user: &str, password: &str, nonce: &str, cnonce: &str) -> String {
    let inner = Md5::digest(format!("{user}:{REALM}:{password}"));
    let mut outer = Md5::new();
    outer.update(inner);
    outer.update(format!(":{nonce}:{cnonce}"));
    hex(&outer.finalize())
}

/// The response-value for QOP `auth`; `method` is "AUTHENTICATE" for the
/// client's response and empty for the server's rspauth.
fn response_value(
    ha1: &str,
    nonce: &str,
    nc: &str,
    cnonce: &str,
    method: &str,
    uri: &str,
) -> String {
    let ha2 = hex(&Md5::digest(format!("{method}:{uri}")));
    hex(&Md5::digest(format!(
        "{ha1}:{nonce}:{nc}:{cnonce}:auth:{ha2}"
    )))
}

/// A DIGEST username is Base64 of the application id.
fn app_id_of(username: &str) -> Option<String> {
    B64.decode(username)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
}

/// `key=value` directives, comma-separated, keys case-insensitive, values a
/// token or a quoted string (`\x` is `x`); a key twice is an error, as in
/// the JDK's parser.
fn parse_directives(text: &str) -> Result<HashMap<String, String>, DigestError> {
    let lws = |c: char| matches!(c, ' ' | '\t' | '\r' | '\n');
    let mut out = HashMap::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start_matches(|c| lws(c) || c == ',');
        if rest.is_empty() {
            return Ok(out);
        }
        let eq = rest
            .find('=')
            .ok_or_else(|| DigestError::Malformed(format!("no '=' in {:?}", truncate(rest))))?;
        let key = rest[..eq].trim_matches(lws).to_ascii_lowercase();
        if key.is_empty() || key.contains([',', '"']) {
            return Err(DigestError::Malformed(format!(
                "bad key in {:?}",
                truncate(rest)
            )));
        }
        rest = rest[eq + 1..].trim_start_matches(lws);
        let value = if let Some(quoted) = rest.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let end = loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, c)) => value.push(c),
                        None => return Err(DigestError::Malformed("unterminated quote".into())),
                    },
                    Some((i, '"')) => break i,
                    Some((_, c)) => value.push(c),
                    None => return Err(DigestError::Malformed("unterminated quote".into())),
                }
            };
            rest = &quoted[end + 1..];
            if !rest.is_empty() && !rest.starts_with(|c| lws(c) || c == ',') {
                return Err(DigestError::Malformed("text after a quoted value".into()));
            }
            value
        } else {
            let end = rest.find(|c| lws(c) || c == ',').unwrap_or(rest.len());
            let value = rest[..end].to_string();
            rest = &rest[end..];
            value
        };
        if out.insert(key.clone(), value).is_some() {
            return Err(DigestError::Duplicate(key));
        }
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JDK-shaped client response (`DigestMD5Client.generateClientResponse`'s order).
    fn jdk_response(app: &str, secret: &[u8], nonce: &str, cnonce: &str) -> String {
        let user = B64.encode(app);
        let ha1 = ha1(&user, &B64.encode(secret), nonce, cnonce);
        let response = response_value(&ha1, nonce, "00000001", cnonce, "AUTHENTICATE", DIGEST_URI);
        format!(
            "charset=utf-8,username=\"{user}\",realm=\"default\",nonce=\"{nonce}\",nc=00000001,cnonce=\"{cnonce}\",digest-uri=\"null/default\",maxbuf=65536,response={response},qop=auth"
        )
    }

    #[test]
    fn our_client_and_server_agree() {
        let c = Challenge::new();
        let (response, rspauth) = super::client_response("app-9", b"k", &c.token()).unwrap();
        let ok = c.verify(&response, |_| Some(b"k".to_vec())).unwrap();
        assert_eq!(ok.app_id, "app-9");
        assert_eq!(ok.rspauth, rspauth);
    }

    #[test]
    fn rfc_2831_example() {
        // RFC 2831 section 4 (imap/elwood.innosoft.com, user chris, password secret).
        let inner = Md5::digest("chris:elwood.innosoft.com:secret");
        let mut outer = Md5::new();
        outer.update(inner);
        outer.update(":OA6MG9tEQGm2hh:OA6MHXh6VqTrRk");
        let ha1 = hex(&outer.finalize());
        let uri = "imap/elwood.innosoft.com";
        let (n, c) = ("OA6MG9tEQGm2hh", "OA6MHXh6VqTrRk");
        assert_eq!(
            response_value(&ha1, n, "00000001", c, "AUTHENTICATE", uri),
            "d388dad90d4bbd760a152321f2143af7"
        );
        assert_eq!(
            response_value(&ha1, n, "00000001", c, "", uri),
            "ea40f60335c427b5527b84dbabcdfffd"
        );
    }

    #[test]
    fn celeborn_shaped_vector() {
        // Computed by a model checked live against the JDK's SASL client and
        // server with Celeborn's parameters.
        let (nonce, cnonce) = ("A".repeat(40), "B".repeat(40));
        let challenge = Challenge::with_nonce(&nonce);
        let response = jdk_response("local-1700000000000", b"s3cr3t-example", &nonce, &cnonce);
        assert!(
            response.contains("response=b6b5a965328887b7a4915a4a02245929"),
            "{response}"
        );
        let ok = challenge
            .verify(response.as_bytes(), |app| {
                (app == "local-1700000000000").then(|| b"s3cr3t-example".to_vec())
            })
            .unwrap();
        assert_eq!(ok.app_id, "local-1700000000000");
        assert_eq!(ok.rspauth, b"rspauth=4330810f69250d5daac5cc7be71e3ebd");
    }

    #[test]
    fn challenge_is_what_the_jdk_sends() {
        let c = Challenge::new();
        let token = String::from_utf8(c.token()).unwrap();
        assert!(token.starts_with("realm=\"default\",nonce=\""), "{token}");
        assert!(
            token.ends_with("\",qop=\"auth\",charset=utf-8,algorithm=md5-sess"),
            "{token}"
        );
        assert_eq!(c.nonce.len(), 40);
        assert_ne!(Challenge::new().nonce, c.nonce);
    }

    #[test]
    fn refuses_what_the_jdk_server_refuses() {
        let nonce = "N".repeat(40);
        let c = Challenge::with_nonce(&nonce);
        let secret = || Some(b"sekrit".to_vec());
        let good = jdk_response("app-1", b"sekrit", &nonce, "cn");
        assert!(c.verify(good.as_bytes(), |_| secret()).is_ok());
        // Wrong secret, unknown app, another nonce.
        assert_eq!(
            c.verify(
                jdk_response("app-1", b"other", &nonce, "cn").as_bytes(),
                |_| secret()
            ),
            Err(DigestError::Mismatch)
        );
        assert_eq!(
            c.verify(good.as_bytes(), |_| None),
            Err(DigestError::UnknownApp("app-1".into()))
        );
        let replay = jdk_response("app-1", b"sekrit", &"M".repeat(40), "cn");
        assert_eq!(
            c.verify(replay.as_bytes(), |_| secret()),
            Err(DigestError::Nonce)
        );
        // A changed uri, qop or realm, a duplicate key, a second nonce count.
        for (from, to) in [
            ("digest-uri=\"null/default\"", "digest-uri=\"rss/default\""),
            ("qop=auth", "qop=auth-conf"),
            ("realm=\"default\"", "realm=\"other\""),
            ("nc=00000001", "nc=00000002"),
            ("maxbuf=65536", "maxbuf=65536,maxbuf=1"),
            ("charset=utf-8", "charset=latin1"),
        ] {
            let bad = good.replace(from, to);
            assert!(c.verify(bad.as_bytes(), |_| secret()).is_err(), "{bad}");
        }
        for missing in ["username", "nonce", "cnonce", "digest-uri", "response"] {
            let bad: Vec<&str> = good
                .split(',')
                .filter(|kv| !kv.starts_with(&format!("{missing}=")))
                .collect();
            assert_eq!(
                c.verify(bad.join(",").as_bytes(), |_| secret()),
                Err(DigestError::Missing(match missing {
                    "username" => "username",
                    "nonce" => "nonce",
                    "cnonce" => "cnonce",
                    "digest-uri" => "digest-uri",
                    _ => "response",
                }))
            );
        }
        assert_eq!(
            c.verify(&vec![b'a'; 5000], |_| secret()),
            Err(DigestError::TooLong(5000))
        );
        assert!(c.verify(b"username=\"unterminated", |_| secret()).is_err());
    }

    #[test]
    fn directives_parse_like_the_jdk() {
        let d = parse_directives(" Realm = \"a\\\"b\" ,, nc=1 ,qop=auth\t").unwrap();
        assert_eq!(d["realm"], "a\"b");
        assert_eq!(d["nc"], "1");
        assert_eq!(d["qop"], "auth");
        assert!(parse_directives("a=1,A=2").is_err());
        assert!(parse_directives("a=\"x\"y").is_err());
        assert!(parse_directives("novalue").is_err());
    }
}
