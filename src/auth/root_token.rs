//! The root token: read from the admin token file, made there at first start
//! (mode 0600, never printed), refused when too short or readable by others.

use super::keys;
use std::io::Write as _;
use std::path::Path;

/// Shortest root token accepted from a file someone wrote by hand.
pub(super) const ROOT_TOKEN_CHARS_MIN: usize = 32;

/// The root token in `path`, made there (mode 0600) when the file does not
/// exist. The file may also be written by hand (at least 32 characters).
pub fn load_or_create_root_token(path: &Path) -> anyhow::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let token = text.trim().to_string();
            anyhow::ensure!(
                token.chars().count() >= ROOT_TOKEN_CHARS_MIN,
                "the admin token file {} holds fewer than {ROOT_TOKEN_CHARS_MIN} characters; write a longer secret or delete it to have one made",
                path.display()
            );
            anyhow::ensure!(
                keys::split(&token).is_none(),
                "the admin token file {} holds a token shaped like an API key (tern_<id>_<secret>); use another secret",
                path.display()
            );
            warn_if_readable_by_others(path);
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = new_root_token();
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            create_atomically(path, &token).map_err(|e| anyhow::anyhow!("cannot create the admin token file {}: {e}", path.display()))?;
            Ok(token)
        }
        Err(e) => anyhow::bail!("cannot read the admin token file {}: {e}", path.display()),
    }
}

/// Writes the token whole or not at all: a temporary file (mode 0600,
/// fsynced), linked to `path` only if nothing is there (a node started
/// beside this one may have made it first), then the directory fsynced. A
/// crash never leaves a file cut short, which the next start would refuse.
fn create_atomically(path: &Path, token: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("tmp.{:016x}", rand::random::<u64>()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        writeln!(file, "{token}")?;
        file.sync_all()?;
        std::fs::hard_link(&tmp, path)
    })();
    let _ = std::fs::remove_file(&tmp);
    written?;
    std::fs::File::open(path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")))?.sync_all()
}

pub(super) fn new_root_token() -> String {
    use base64::Engine;
    let secret: [u8; 32] = rand::random();
    format!("tern-root-{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret))
}

pub(super) fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(path = %path.display(), "the admin token file is readable by others than its owner; chmod 600 it");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{AuthConfig, AuthError, Authenticator, Grant, Identity, Verb, Verbs};

    #[test]
    fn the_root_token_file_is_made_once_with_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.token");
        let token = load_or_create_root_token(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(load_or_create_root_token(&path).unwrap(), token, "read again, not made again");
        let names: Vec<String> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["admin.token"], "made whole, no temporary file left");
        std::fs::write(&path, "short").unwrap();
        assert!(load_or_create_root_token(&path).is_err());
    }

    #[test]
    fn tokens_are_told_apart_and_errors_never_repeat_them() {
        let auth = Authenticator::new(&AuthConfig { root_token: Some("r".repeat(40)), ..Default::default() }).unwrap();
        assert!(matches!(auth.authenticate(&"r".repeat(40)), Ok(Identity::Root)));
        assert_eq!(auth.authenticate("  ").unwrap_err(), AuthError::Missing);
        for bad in ["tern_nothex_x", "tern_0123456789abcdef_secret", "a.b.c", "owner", &"r".repeat(39)] {
            let error = auth.authenticate(bad).unwrap_err();
            assert!(matches!(error, AuthError::Invalid(_)), "{bad}");
            assert!(!error.message().contains(bad), "{bad}: {}", error.message());
        }
        let new =
            keys::generate(vec![Grant { ns: "app".into(), prefix: String::new(), verbs: Verbs::of(&[Verb::Read]) }], "root".into(), String::new(), 0);
        auth.keys.insert(new.record.clone());
        let identity = auth.authenticate(&new.token).unwrap();
        assert_eq!(identity.name(), format!("key:{}", new.record.id));
        assert!(identity.allows("app", "x", Verb::Read).is_ok());
        assert!(identity.allows("app", "x", Verb::Write).is_err());
        assert!(identity.allows_everywhere(Verb::Admin).is_err());
    }
}
