//! Which offered object names a receiver may store.

use std::path::PathBuf;

/// Checks an offered name and returns it as a relative path, or says why it
/// is unsafe: empty, absolute, containing NUL, or with a component that is
/// empty, `.` or `..` (so it can never leave the output directory).
pub fn safe_relative_path(name: &str) -> Result<PathBuf, String> {
    if name.is_empty() {
        return Err("file name is empty".into());
    }
    if name.contains('\0') {
        return Err(format!("file name {name:?} contains a NUL byte"));
    }
    if name.starts_with('/') {
        return Err(format!(
            "file name {name:?} is unsafe: it is an absolute path"
        ));
    }
    let mut path = PathBuf::new();
    for part in name.split('/') {
        match part {
            "" => {
                return Err(format!(
                    "file name {name:?} is unsafe: it has an empty path component"
                ));
            }
            "." | ".." => {
                return Err(format!(
                    "file name {name:?} is unsafe: it has a {part:?} path component"
                ));
            }
            _ => path.push(part),
        }
    }
    // Belt and braces: whatever std makes of it must be plain names only.
    if !path
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)))
    {
        return Err(format!("file name {name:?} is unsafe"));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_nested_names_are_accepted() {
        assert_eq!(safe_relative_path("a.bin").unwrap(), PathBuf::from("a.bin"));
        assert_eq!(
            safe_relative_path("a/b.bin").unwrap(),
            PathBuf::from("a/b.bin")
        );
        assert_eq!(safe_relative_path("..a").unwrap(), PathBuf::from("..a"));
        assert_eq!(
            safe_relative_path("a..b/c").unwrap(),
            PathBuf::from("a..b/c")
        );
    }

    #[test]
    fn escaping_names_are_refused() {
        for bad in [
            "",
            "/etc/passwd",
            "../evil",
            "a/../../b",
            "..",
            ".",
            "./a",
            "a/./b",
            "a//b",
            "a/",
            "a\0b",
            "a/..",
        ] {
            assert!(safe_relative_path(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn refusal_says_why() {
        let e = safe_relative_path("../evil").unwrap_err();
        assert!(e.contains("unsafe") && e.contains("\"..\""), "{e}");
    }
}
