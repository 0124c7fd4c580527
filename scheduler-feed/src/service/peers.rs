//! Which instance owns a partition, as the group's commits say it, and
//! whether to believe them.
//!
//! Every offset an instance commits carries, as its metadata, the URL its
//! HTTP API is reached at (`http.advertised_url`), so that a request for a
//! job another instance holds is redirected there (`http::elsewhere`). Any
//! client of the brokers that may commit to the group could write any URL
//! there, and collect the redirected clients. So with `http.token` set the
//! URL is signed, HMAC-SHA256 keyed by the token every instance of the
//! deployment shares, and a URL whose signature does not check is no
//! owner's (logged and counted). Without a token, the API is served over
//! TLS (`ServeConfig::validate` insists on one of the two), and a peer is
//! believed only if it proves, with a certificate `http.tls` verifies,
//! that it is who the URL names.

use ring::hmac;
use tracing::warn;

use crate::config::HttpToken;
use crate::telemetry;

/// Between the URL and its signature in a commit's metadata (a URL holds
/// no space: `http.advertised_url` is checked).
const SEPARATOR: char = ' ';

/// Signs this instance's URL and checks the others'.
pub(crate) struct PeerSeal {
    key: Option<hmac::Key>,
}

impl PeerSeal {
    /// Signing with `token`, if the deployment has one.
    pub(crate) fn new(token: Option<&HttpToken>) -> Self {
        PeerSeal {
            key: token.map(|t| hmac::Key::new(hmac::HMAC_SHA256, t.secret())),
        }
    }

    /// The metadata to commit for `url`.
    pub(crate) fn seal(&self, url: &str) -> String {
        match &self.key {
            Some(key) => format!(
                "{url}{SEPARATOR}{}",
                hex(hmac::sign(key, url.as_bytes()).as_ref())
            ),
            None => url.to_owned(),
        }
    }

    /// The URL `metadata` names, if it is an instance of this deployment's
    /// (its signature checks, when URLs are signed).
    pub(crate) fn open(&self, metadata: &str) -> Option<String> {
        if metadata.is_empty() {
            return None;
        }
        let Some(key) = &self.key else {
            return Some(metadata.to_owned());
        };
        let verified = metadata.split_once(SEPARATOR).and_then(|(url, signature)| {
            let signature = unhex(signature)?;
            hmac::verify(key, url.as_bytes(), &signature).ok()?;
            Some(url.to_owned())
        });
        if verified.is_none() {
            warn!(
                metadata = metadata.chars().take(200).collect::<String>(),
                "a commit to the group names an owner URL not signed with this deployment's \
                 http.token: not believed (a client of the group that is no jobcast of this \
                 deployment?)"
            );
            metrics::counter!(telemetry::HTTP_PEERS_REFUSED).increment(1);
        }
        verified
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_urls_signed_with_the_deployments_token_are_believed() {
        let ours = PeerSeal::new(Some(&HttpToken::new("shared-token-0123")));
        let sealed = ours.seal("http://10.0.0.7:8080");
        assert_eq!(ours.open(&sealed).as_deref(), Some("http://10.0.0.7:8080"));
        // A rogue member's URL: unsigned, signed with another key, or a
        // signature moved onto another URL.
        let rogue = PeerSeal::new(Some(&HttpToken::new("guessed-token-99")));
        let (_, signature) = sealed.split_once(' ').unwrap();
        for metadata in [
            "http://rogue:8080".to_owned(),
            rogue.seal("http://rogue:8080"),
            format!("http://rogue:8080 {signature}"),
            "http://rogue:8080 zz".to_owned(),
            String::new(),
        ] {
            assert_eq!(ours.open(&metadata), None, "{metadata}");
        }
        // Without a token (TLS verifies peers), the URL is taken as it is.
        let unsigned = PeerSeal::new(None);
        assert_eq!(unsigned.seal("https://a:8443"), "https://a:8443");
        assert_eq!(
            unsigned.open("https://a:8443").as_deref(),
            Some("https://a:8443")
        );
    }
}
