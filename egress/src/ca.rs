//! A box's own certificate authority: what lets boxd answer the box's TLS
//! for a host a secret names, so the secret can go in outside the box.
//!
//! One per box, made when the box is made (ECDSA P-256): its certificate
//! is given to the box to trust, its key stays in the box's state, in a
//! file only boxd's user may read ([`KEY_FILE`], mode 0600, made with
//! `O_EXCL`), and goes with the box. Certificates for hosts are minted on
//! demand, valid for a day (and an hour before, for clocks that differ),
//! kept while more than an hour of that is left, so a connection costs no
//! signing once its host has been seen.
//!
//! Invariants: the key is never written anywhere but [`KEY_FILE`] of the
//! directory it was made in, never with more than owner access; a leaf
//! names one host (a DNS name or an IP address) and cannot sign.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

/// The CA's certificate (PEM), for the box to trust.
pub const CERT_FILE: &str = "ca.pem";
/// The CA's private key (PEM, PKCS#8), boxd's alone.
pub const KEY_FILE: &str = "ca.key";

/// How long a minted host certificate is valid.
const LEAF_LIFETIME: Duration = Duration::days(1);
/// A cached host certificate is minted again once less than this is left.
const LEAF_MARGIN: Duration = Duration::hours(1);
/// At most this many host certificates are kept.
const LEAF_CACHE: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("making a certificate: {0}")]
    Cert(#[from] rcgen::Error),
    #[error("{0:?} is not a host name or an IP address a certificate can name")]
    BadHost(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> CaError {
    let what = what.into();
    move |source| CaError::Io { what, source }
}

/// A host's certificate and key, as a TLS server presents them.
pub struct Leaf {
    /// The host's certificate (DER), then the CA's.
    pub chain: Vec<Vec<u8>>,
    /// The host certificate's private key (PKCS#8 DER).
    pub key: Vec<u8>,
    not_after: OffsetDateTime,
}

/// A box's CA, loaded: it mints host certificates.
pub struct BoxCa {
    /// The issuer, as rcgen signs with it (the same name and key as the
    /// certificate the box trusts).
    issuer: rcgen::Certificate,
    key: KeyPair,
    cert_pem: String,
    cert_der: Vec<u8>,
    leaves: Mutex<HashMap<String, Arc<Leaf>>>,
}

impl BoxCa {
    /// Makes a new CA for the box `name` in `dir` (its state directory,
    /// which must exist): the key in [`KEY_FILE`] (0600, never replacing
    /// one), the certificate in [`CERT_FILE`].
    pub fn create(dir: &Path, name: &str) -> Result<BoxCa, CaError> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let params = ca_params(name);
        write_new(&dir.join(KEY_FILE), key.serialize_pem().as_bytes(), 0o600)?;
        let ca = BoxCa::from_parts(params, key)?;
        write_new(&dir.join(CERT_FILE), ca.cert_pem.as_bytes(), 0o644)?;
        Ok(ca)
    }

    /// The CA that [`BoxCa::create`] made in `dir` for the box `name`.
    pub fn load(dir: &Path, name: &str) -> Result<BoxCa, CaError> {
        let key_path = dir.join(KEY_FILE);
        let key_pem = std::fs::read_to_string(&key_path)
            .map_err(io(format!("read {}", key_path.display())))?;
        let key = KeyPair::from_pem(&key_pem)?;
        let mut ca = BoxCa::from_parts(ca_params(name), key)?;
        // The certificate the box trusts is the one on disk: the same
        // name and key, so what is minted now chains to it.
        let cert_path = dir.join(CERT_FILE);
        if let Ok(pem) = std::fs::read_to_string(&cert_path) {
            use rustls_pki_types::pem::PemObject;
            let der =
                rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| {
                    CaError::Io {
                        what: format!("read {}", cert_path.display()),
                        source: std::io::Error::other(e.to_string()),
                    }
                })?;
            ca.cert_der = der.to_vec();
            ca.cert_pem = pem;
        }
        Ok(ca)
    }

    fn from_parts(params: CertificateParams, key: KeyPair) -> Result<BoxCa, CaError> {
        let issuer = params.self_signed(&key)?;
        Ok(BoxCa {
            cert_pem: issuer.pem(),
            cert_der: issuer.der().to_vec(),
            issuer,
            key,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA's certificate, PEM, as the box trusts it.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A certificate for `host` (a DNS name or an IP address), minted now
    /// or kept from before.
    pub fn leaf(&self, host: &str) -> Result<Arc<Leaf>, CaError> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let now = OffsetDateTime::now_utc();
        if let Some(leaf) = self.leaves.lock().expect("leaf cache").get(&host)
            && leaf.not_after - now > LEAF_MARGIN
        {
            return Ok(leaf.clone());
        }
        let leaf = Arc::new(self.mint(&host, now)?);
        let mut leaves = self.leaves.lock().expect("leaf cache");
        if leaves.len() >= LEAF_CACHE {
            leaves.retain(|_, l| l.not_after - now > LEAF_MARGIN);
            if leaves.len() >= LEAF_CACHE {
                leaves.clear();
            }
        }
        leaves.insert(host, leaf.clone());
        Ok(leaf)
    }

    fn mint(&self, host: &str, now: OffsetDateTime) -> Result<Leaf, CaError> {
        let san = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) if valid_dns_name(host) => SanType::DnsName(
                host.to_owned()
                    .try_into()
                    .map_err(|_| CaError::BadHost(host.to_owned()))?,
            ),
            Err(_) => return Err(CaError::BadHost(host.to_owned())),
        };
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![san];
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host);
        params.distinguished_name = dn;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_before = now - Duration::hours(1);
        params.not_after = now + LEAF_LIFETIME;
        params.serial_number = Some(serial());
        params.use_authority_key_identifier_extension = true;
        let not_after = params.not_after;
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let cert = params.signed_by(&key, &self.issuer, &self.key)?;
        Ok(Leaf {
            chain: vec![cert.der().to_vec(), self.cert_der.clone()],
            key: key.serialize_der(),
            not_after,
        })
    }
}

/// The CA's certificate parameters: a fixed name per box, so that a CA
/// loaded again is the same issuer.
fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "boxd");
    // The box's name is validated (letters, digits, `-`, `_`, `.`).
    dn.push(DnType::CommonName, format!("boxd box {name}"));
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = OffsetDateTime::new_utc(
        time::Date::from_calendar_date(2025, time::Month::January, 1).expect("a date"),
        time::Time::MIDNIGHT,
    );
    params.not_after = params.not_before + Duration::days(365 * 20);
    params
}

/// A host name a certificate may carry: labels of letters, digits and
/// `-` (a leading `*.` not allowed: a leaf names one host).
fn valid_dns_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

fn serial() -> rcgen::SerialNumber {
    let mut bytes = [0u8; 16];
    // Unique enough for a day's certificates of one CA: time and a counter.
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = OffsetDateTime::now_utc().unix_timestamp_nanos() as u64;
    bytes[..8].copy_from_slice(&t.to_be_bytes());
    bytes[8..].copy_from_slice(&n.to_be_bytes());
    bytes[0] &= 0x7f; // positive
    rcgen::SerialNumber::from_slice(&bytes)
}

/// Writes a file that must not exist yet, with `mode` from its creation on.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), CaError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io(format!("create {}", path.display())))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(io(format!("write {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use std::os::unix::fs::PermissionsExt;

    fn verifier(ca_pem: &str) -> Arc<rustls::client::WebPkiServerVerifier> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
            .unwrap();
        rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap()
    }

    fn verifies(ca_pem: &str, leaf: &Leaf, host: &str) -> Result<(), rustls::Error> {
        let end = CertificateDer::from(leaf.chain[0].clone());
        let rest = [CertificateDer::from(leaf.chain[1].clone())];
        verifier(ca_pem)
            .verify_server_cert(
                &end,
                &rest,
                &ServerName::try_from(host.to_owned()).unwrap(),
                &[],
                UnixTime::now(),
            )
            .map(drop)
    }

    #[test]
    fn a_box_s_ca_mints_host_certificates_that_chain_to_it_and_to_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let ca = BoxCa::create(dir.path(), "agent").unwrap();
        let key_mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(key_mode & 0o777, 0o600);
        let leaf = ca.leaf("api.example.com").unwrap();
        verifies(ca.cert_pem(), &leaf, "api.example.com").unwrap();
        // Another host's name: refused by any client.
        assert!(verifies(ca.cert_pem(), &leaf, "evil.example.com").is_err());
        // An IP address.
        let ip = ca.leaf("127.0.0.1").unwrap();
        verifies(ca.cert_pem(), &ip, "127.0.0.1").unwrap();
        // Another box's CA does not vouch for this one's certificates.
        let other = tempfile::tempdir().unwrap();
        let other = BoxCa::create(other.path(), "agent").unwrap();
        assert!(verifies(other.cert_pem(), &leaf, "api.example.com").is_err());
        // Kept: the same certificate the second time, case and dot aside.
        assert!(Arc::ptr_eq(&leaf, &ca.leaf("API.example.com.").unwrap()));
        // A CA made once is never replaced.
        assert!(BoxCa::create(dir.path(), "agent").is_err());
    }

    #[test]
    fn a_ca_loaded_again_keeps_vouching_for_what_the_box_trusts() {
        let dir = tempfile::tempdir().unwrap();
        let made = BoxCa::create(dir.path(), "b1").unwrap();
        let trusted = made.cert_pem().to_owned();
        drop(made);
        let loaded = BoxCa::load(dir.path(), "b1").unwrap();
        assert_eq!(loaded.cert_pem(), trusted);
        let leaf = loaded.leaf("api.example.com").unwrap();
        verifies(&trusted, &leaf, "api.example.com").unwrap();
        // The chain it presents carries the very certificate trusted.
        use rustls::pki_types::pem::PemObject;
        let der = CertificateDer::from_pem_slice(trusted.as_bytes()).unwrap();
        assert_eq!(leaf.chain[1], der.to_vec());
    }

    #[test]
    fn hosts_a_certificate_cannot_name_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = BoxCa::create(dir.path(), "b").unwrap();
        for bad in [
            "",
            "*.example.com",
            "a..b",
            "-a.com",
            "a b",
            "x\u{1b}]0;t\u{7}",
            &"a".repeat(64),
        ] {
            assert!(matches!(ca.leaf(bad), Err(CaError::BadHost(_))), "{bad:?}");
        }
    }
}
