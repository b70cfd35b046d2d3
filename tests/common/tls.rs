//! Throwaway certificates for the TLS tests, made with the `openssl` CLI
//! (no crate dependency for the tests alone): a trusted CA, an untrusted
//! one, and server certificates signed by them.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A directory of PEM files: `trusted-ca.crt`, `untrusted-ca.crt`, and for
/// each server certificate `<name>.crt` / `<name>.key`.
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    /// Makes the two CAs in a fresh directory under `dir`.
    pub fn new(dir: &Path) -> Pki {
        fs::create_dir_all(dir).expect("pki dir");
        let pki = Pki {
            dir: dir.to_path_buf(),
        };
        for ca in ["trusted-ca", "untrusted-ca"] {
            pki.openssl(&[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN=punctual test {ca}"),
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.crt"),
            ]);
        }
        pki
    }

    /// A server certificate `name` for the subject alternative names
    /// `sans` (e.g. `DNS:localhost,IP:127.0.0.1`), signed by `ca`.
    pub fn server_cert(&self, name: &str, sans: &str, ca: &str) {
        fs::write(
            self.dir.join(format!("{name}.ext")),
            format!(
                "subjectAltName={sans}\nbasicConstraints=CA:FALSE\n\
                 keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
            ),
        )
        .expect("ext file");
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.crt"),
        ]);
    }

    pub fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    /// `redis-server` arguments for TLS on `port` with certificate `name`
    /// (clients are not asked for certificates).
    pub fn server_args(&self, name: &str, port: u16) -> Vec<String> {
        vec![
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            self.path(&format!("{name}.crt")),
            "--tls-key-file".into(),
            self.path(&format!("{name}.key")),
            "--tls-ca-cert-file".into(),
            self.path("trusted-ca.crt"),
            "--tls-auth-clients".into(),
            "no".into(),
        ]
    }

    fn openssl(&self, args: &[&str]) {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("the TLS tests need the openssl CLI: {e}"));
        assert!(
            output.status.success(),
            "openssl {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
