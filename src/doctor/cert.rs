//! The SMTP certificate as a sending server sees it: fetched over STARTTLS whatever its chain,
//! then its names and its end date judged.

use super::*;

/// Accepts any certificate, keeping the end-entity one: the doctor inspects it itself.
#[derive(Debug)]
struct Capture {
    seen: Mutex<Option<Vec<u8>>>,
    algs: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl rustls::client::danger::ServerCertVerifier for Capture {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if let Ok(mut s) = self.seen.lock() {
            *s = Some(end_entity.to_vec());
        }
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// One SMTP reply (its lines joined), or why there was none.
async fn smtp_reply<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> Result<String, String> {
    let mut all = String::new();
    loop {
        let mut line = String::new();
        let n = r.read_line(&mut line).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed".into());
        }
        all.push_str(&line);
        if line.as_bytes().get(3) != Some(&b'-') {
            return Ok(all);
        }
    }
}

/// The end-entity certificate the SMTP server at `addr` presents after STARTTLS (DER).
pub(super) async fn smtp_certificate(addr: &str) -> Result<Vec<u8>, String> {
    let exchange = async {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let mut io = BufReader::new(tcp);
        let greeting = smtp_reply(&mut io).await?;
        if !greeting.starts_with("220") {
            return Err(format!("greeting {:?}", greeting.trim()));
        }
        io.get_mut()
            .write_all(b"EHLO doctor.invalid\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let ehlo = smtp_reply(&mut io).await?;
        if !ehlo.to_ascii_uppercase().contains("STARTTLS") {
            return Err("STARTTLS is not offered".into());
        }
        io.get_mut()
            .write_all(b"STARTTLS\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let go = smtp_reply(&mut io).await?;
        if !go.starts_with("220") {
            return Err(format!("STARTTLS answered {:?}", go.trim()));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let capture = Arc::new(Capture {
            seen: Mutex::new(None),
            algs: provider.signature_verification_algorithms,
        });
        let cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(capture.clone())
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
        // SNI is the host name when the address is one; any name does for an IP.
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        let name =
            rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
        let mut tls = connector
            .connect(name, io.into_inner())
            .await
            .map_err(|e| format!("TLS handshake: {e}"))?;
        let _ = tls.write_all(b"QUIT\r\n").await;
        let seen = capture.seen.lock().map_err(|e| e.to_string())?.clone();
        seen.ok_or_else(|| "no certificate presented".to_owned())
    };
    tokio::time::timeout(STEP_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {STEP_TIMEOUT:?}")))
}

pub(super) fn cert_checks(der: &[u8], hostname: &str, addr: &str, now: i64, report: &mut Report) {
    let cert = rustls::pki_types::CertificateDer::from(der);
    let names_ok = rustls::server::ParsedCertificate::try_from(&cert)
        .map_err(|e| e.to_string())
        .and_then(|parsed| {
            let name = rustls::pki_types::ServerName::try_from(hostname.to_owned())
                .map_err(|e| e.to_string())?;
            rustls::client::verify_server_name(&parsed, &name).map_err(|e| e.to_string())
        });
    let renew = format!("a certificate for {hostname} in email.tls_cert_file");
    match names_ok {
        Ok(()) => report.pass(
            "smtp-cert-name",
            format!("the certificate at {addr} covers {hostname}"),
        ),
        Err(e) => report.fail(
            "smtp-cert-name",
            format!("the certificate at {addr} does not cover {hostname}: {e}"),
            format!("install {renew}"),
        ),
    }
    match not_after(der) {
        None => report.fail(
            "smtp-cert-expiry",
            format!("the certificate at {addr} has no readable validity"),
            format!("install {renew}"),
        ),
        Some(end) if end <= now => report.fail(
            "smtp-cert-expiry",
            format!("the certificate at {addr} expired on {}", date(end)),
            format!("renew it: install {renew}"),
        ),
        Some(end) if end - now < CERT_WARN_DAYS * 86_400 => report.warn(
            "smtp-cert-expiry",
            format!(
                "the certificate at {addr} expires on {}, within {CERT_WARN_DAYS} days",
                date(end)
            ),
            format!("renew it: install {renew}"),
        ),
        Some(end) => report.pass(
            "smtp-cert-expiry",
            format!("the certificate at {addr} is valid until {}", date(end)),
        ),
    }
}

fn date(unix_s: i64) -> String {
    chrono::DateTime::from_timestamp(unix_s, 0)
        .map_or_else(|| unix_s.to_string(), |d| d.format("%Y-%m-%d").to_string())
}

/// The `notAfter` of an X.509 certificate (DER), in unix seconds.
#[must_use]
pub fn not_after(der: &[u8]) -> Option<i64> {
    use der::{Decode, Reader, Tag, Tagged, asn1::AnyRef};
    fn rest<'a, R: Reader<'a>>(r: &mut R) -> der::Result<()> {
        while !r.is_finished() {
            AnyRef::decode(r)?;
        }
        Ok(())
    }
    let mut r = der::SliceReader::new(der).ok()?;
    let end = r
        .sequence(|cert| {
            let end = cert.sequence(|tbs| {
                // The optional [0] version, then serial, signature, issuer, validity.
                if AnyRef::decode(tbs)?.tag() != Tag::Integer {
                    AnyRef::decode(tbs)?;
                }
                AnyRef::decode(tbs)?;
                AnyRef::decode(tbs)?;
                let end = tbs.sequence(|validity| {
                    AnyRef::decode(validity)?;
                    let t = AnyRef::decode(validity)?;
                    Ok(match t.tag() {
                        Tag::UtcTime => der::asn1::UtcTime::try_from(t)?.to_unix_duration(),
                        _ => der::asn1::GeneralizedTime::try_from(t)?.to_unix_duration(),
                    })
                })?;
                rest(tbs)?;
                Ok(end)
            })?;
            rest(cert)?;
            Ok(end)
        })
        .ok()?;
    i64::try_from(end.as_secs()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_ends_in_both_time_forms() {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let end = |name: &str| {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/email")
                .join(name);
            not_after(&CertificateDer::from_pem_file(path).unwrap())
        };
        // GeneralizedTime (after 2049) and UTCTime.
        assert_eq!(end("tls.crt"), Some(4_948_930_300));
        assert_eq!(end("utc-time.crt"), Some(2_111_004_891));
        assert_eq!(not_after(b"\x30\x03\x02\x01\x01"), None);
    }
}
