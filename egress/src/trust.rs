//! What a box trusts once boxd answers TLS for its secrets' hosts: the
//! image's own roots (or the host's, when the image has none) and the
//! box's CA, merged — never the CA alone, so every host that is not
//! intercepted verifies as it did.
//!
//! [`BUNDLE_PATHS`] are where the usual distributions keep their bundle;
//! [`BOXD_BUNDLE`] is boxd's own copy; [`env`] names the variables that
//! the common runtimes and tools read.

/// The bundle files of Debian/Ubuntu/Alpine, Alpine's and LibreSSL's,
/// RHEL/Fedora's and openSUSE's: each that the image has (or whose
/// directory it has) gets the merged bundle.
pub const BUNDLE_PATHS: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/ssl/cert.pem",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
];
/// boxd's copy of the merged bundle, in every box that has secrets.
pub const BOXD_BUNDLE: &str = "/etc/boxd/ca-bundle.pem";
/// boxd's CA alone (for `NODE_EXTRA_CA_CERTS`, which adds to Node's own
/// roots).
pub const BOXD_CA: &str = "/etc/boxd/ca.pem";
/// Where Debian's `update-ca-certificates` looks for local CAs: the CA
/// there survives the box running it.
pub const LOCAL_CA: &str = "/usr/local/share/ca-certificates/boxd-box-ca.crt";
/// The most of an image's bundle that is read.
pub const MAX_BUNDLE: usize = 8 << 20;

/// The variables that point programs at the merged bundle (or, Node, at
/// the CA to add).
pub fn env() -> Vec<(&'static str, &'static str)> {
    let mut vars: Vec<(&str, &str)> = [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "PIP_CERT",
        "GIT_SSL_CAINFO",
        "CARGO_HTTP_CAINFO",
        "DENO_CERT",
    ]
    .into_iter()
    .map(|v| (v, BOXD_BUNDLE))
    .collect();
    vars.push(("NODE_EXTRA_CA_CERTS", BOXD_CA));
    vars
}

/// The merged bundle: the certificates of `image` (the image's own bundle,
/// if it has one), else of `host`, then `ca`. Only whole PEM certificate
/// blocks are kept (comments, keys and anything else dropped), each
/// once, and no box CA of an earlier start (a clone's source's, say: the
/// bundle is merged again at every start); `None` when `image` and `host`
/// hold no other certificate at all (a box would then trust the CA alone:
/// refused by the caller).
pub fn merged(image: Option<&[u8]>, host: &[u8], ca: &str) -> Option<String> {
    let theirs = |text: &[u8]| -> Vec<String> {
        certificates(text)
            .into_iter()
            .filter(|c| !is_box_ca(c))
            .collect()
    };
    let roots = image
        .map(theirs)
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| theirs(host));
    if roots.is_empty() {
        return None;
    }
    let mut out = String::new();
    let mut seen = std::collections::HashSet::new();
    for cert in roots.into_iter().chain(certificates(ca.as_bytes())) {
        if seen.insert(cert.clone()) {
            out.push_str(&cert);
        }
    }
    Some(out)
}

/// Whether a PEM block is a boxd box CA (its subject's common name,
/// [`crate::ca`]'s `boxd box …`, is in its DER).
fn is_box_ca(pem: &str) -> bool {
    use base64::Engine;
    let body: String = pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<String>()
        .split_whitespace()
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .is_ok_and(|der| der.windows(CA_MARK.len()).any(|w| w == CA_MARK))
}

/// What every box CA's subject holds.
const CA_MARK: &[u8] = b"boxd box ";

/// The PEM `CERTIFICATE` blocks of `text`, each ending in a newline.
fn certificates(text: &[u8]) -> Vec<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let text = String::from_utf8_lossy(&text[..text.len().min(MAX_BUNDLE)]);
    let mut out = Vec::new();
    let mut rest = &*text;
    while let Some(start) = rest.find(BEGIN) {
        let Some(len) = rest[start..].find(END) else {
            break;
        };
        let block = &rest[start..start + len + END.len()];
        let body = &block[BEGIN.len()..block.len() - END.len()];
        if body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=\r\n \t".contains(&b))
        {
            out.push(format!("{block}\n"));
        }
        rest = &rest[start + len + END.len()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "-----BEGIN CERTIFICATE-----\nQUFB\n-----END CERTIFICATE-----";
    const B: &str = "-----BEGIN CERTIFICATE-----\nQkJC\n-----END CERTIFICATE-----";
    const CA: &str = "-----BEGIN CERTIFICATE-----\nQ0FD\n-----END CERTIFICATE-----\n";

    #[test]
    fn the_bundle_is_the_image_s_roots_or_the_host_s_then_the_ca_never_the_ca_alone() {
        let image = format!("# comment\n{A}\nnoise\n{B}\n{A}\n");
        let got = merged(Some(image.as_bytes()), B.as_bytes(), CA).unwrap();
        assert_eq!(got, format!("{A}\n{B}\n{CA}"));
        // No bundle in the image: the host's.
        let got = merged(None, B.as_bytes(), CA).unwrap();
        assert_eq!(got, format!("{B}\n{CA}"));
        let got = merged(Some(b"not a bundle"), A.as_bytes(), CA).unwrap();
        assert_eq!(got, format!("{A}\n{CA}"));
        // Nothing to merge with: none.
        assert_eq!(merged(None, b"", CA), None);
        // A private key or a broken block in the image is not copied.
        let hostile = format!(
            "-----BEGIN PRIVATE KEY-----\nSECRET\n-----END PRIVATE KEY-----\n{A}\n-----BEGIN CERTIFICATE-----\n<script>\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nQUFB"
        );
        let got = merged(Some(hostile.as_bytes()), b"", CA).unwrap();
        assert_eq!(got, format!("{A}\n{CA}"));
    }

    #[test]
    fn an_earlier_box_ca_is_dropped_and_the_merge_is_stable() {
        let dir = tempfile::tempdir().unwrap();
        let old = crate::ca::BoxCa::create(dir.path(), "source").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let new = crate::ca::BoxCa::create(dir.path(), "clone").unwrap();
        let image = format!("{A}\n{}", old.cert_pem());
        let once = merged(Some(image.as_bytes()), b"", new.cert_pem()).unwrap();
        assert_eq!(once, format!("{A}\n{}", new.cert_pem()));
        let twice = merged(Some(once.as_bytes()), b"", new.cert_pem()).unwrap();
        assert_eq!(twice, once);
    }

    #[test]
    fn every_variable_points_at_a_boxd_file() {
        for (name, path) in env() {
            assert!(path == BOXD_BUNDLE || path == BOXD_CA, "{name}");
        }
        assert!(
            env()
                .iter()
                .any(|(n, p)| *n == "NODE_EXTRA_CA_CERTS" && *p == BOXD_CA)
        );
    }
}
