//! Certificates read from PEM files: the SMTP listener's chain (`email.tls_cert_file`) and the
//! authorities direct delivery trusts besides the public ones (`email.tls_roots_file`).

use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::pki_types::pem::PemObject;

/// Every certificate of the PEM file at `path`, in order; an error names what is wrong (the file
/// cannot be read, a block does not decode, or there is no certificate at all).
///
/// # Errors
/// The reason, for the caller to put after the setting's name.
pub fn certificates(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate in it".into());
    }
    Ok(certs)
}
