//! [`Secret`]: a configured string that never prints, in logs, `Debug` or masked TOML.

use serde::{Deserialize, Serialize};

/// What a secret prints as, and serialises to.
pub(super) const MASK: &str = "********";

/// A secret string that never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    #[must_use]
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    /// The secret itself; keep it out of logs.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(********)")
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(MASK)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Environment values that look like numbers arrive typed; a secret takes any scalar.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Scalar {
            S(String),
            I(i64),
            F(f64),
            B(bool),
        }
        Ok(Self(match Scalar::deserialize(d)? {
            Scalar::S(s) => s,
            Scalar::I(i) => i.to_string(),
            Scalar::F(f) => f.to_string(),
            Scalar::B(b) => b.to_string(),
        }))
    }
}

/// The fewest bytes a webhook secret, the API token or the console token may have: shorter
/// ones are guessable, and an empty webhook secret makes every signature forgeable.
pub const MIN_SECRET_BYTES: usize = 16;

/// Keys holding secrets: each may instead be read from the file named by `{key}_file`.
const SECRET_KEYS: &[&str] = &[
    "secret",
    "token",
    "client_secret",
    "callback_secret",
    "relay_password",
    "kek",
];

/// The environment variable systemd sets to the directory of a unit's credentials
/// (`LoadCredential=`).
pub const CREDENTIALS_DIRECTORY: &str = "CREDENTIALS_DIRECTORY";

/// Whether `key` at `path` (dotted, without the key) holds a secret: the names of
/// [`SECRET_KEYS`] anywhere, and the database URL (it may carry a password).
fn is_secret_key(path: &str, key: &str) -> bool {
    SECRET_KEYS.contains(&key) || (path == "database" && key == "url")
}

/// Replaces each `{key}_file` beside a secret key with `{key}` holding the file's contents,
/// its trailing newline trimmed. A relative path is resolved in `credentials` (systemd's
/// `$CREDENTIALS_DIRECTORY`) when that is set, else in the current directory. Every problem is
/// listed: a secret given both ways, a file that cannot be read or is empty.
pub(super) fn read_secret_files(
    root: &mut toml::Value,
    credentials: Option<&std::path::Path>,
) -> Result<(), String> {
    let mut problems = Vec::new();
    walk(root, "", credentials, &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// [`read_secret_files`] below `path`.
fn walk(
    value: &mut toml::Value,
    path: &str,
    credentials: Option<&std::path::Path>,
    problems: &mut Vec<String>,
) {
    match value {
        toml::Value::Table(table) => {
            let files: Vec<String> = table
                .keys()
                .filter(|k| {
                    k.strip_suffix("_file")
                        .is_some_and(|key| is_secret_key(path, key))
                })
                .cloned()
                .collect();
            for file_key in files {
                let key = file_key.trim_end_matches("_file").to_owned();
                let at = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                let Some(named) = table.remove(&file_key) else {
                    continue;
                };
                let Some(name) = named.as_str() else {
                    problems.push(format!("{at}_file: must be a file path"));
                    continue;
                };
                if table.contains_key(&key) {
                    problems.push(format!(
                        "{at}: set both as a value and by {at}_file; keep one"
                    ));
                    continue;
                }
                match read_secret_file(name, credentials) {
                    Ok(secret) => {
                        table.insert(key, toml::Value::String(secret));
                    }
                    Err(e) => problems.push(format!("{at}_file: {e}")),
                }
            }
            for (k, v) in table.iter_mut() {
                let below = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                walk(v, &below, credentials, problems);
            }
        }
        toml::Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                walk(v, &format!("{path}[{i}]"), credentials, problems);
            }
        }
        _ => {}
    }
}

/// The secret in the file `name`: relative names are looked up in `credentials` when given.
fn read_secret_file(name: &str, credentials: Option<&std::path::Path>) -> Result<String, String> {
    let named = std::path::Path::new(name);
    let path = match credentials {
        Some(dir) if named.is_relative() => dir.join(named),
        _ => named.to_path_buf(),
    };
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let secret = text.trim_end_matches(['\n', '\r']);
    if secret.is_empty() {
        return Err(format!("{}: empty", path.display()));
    }
    Ok(secret.to_owned())
}
