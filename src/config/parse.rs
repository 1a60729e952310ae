//! The rules flags' values follow, shared by the commands that take them.

use chrono::{DateTime, Utc};

/// The one rule for fleet names, on every command that takes `--fleet`
/// (the `CHECK` of `api_tokens.fleet` in the baseline says the same): 1 to
/// 63 ASCII letters, digits, `.`, `_` and `-`, starting with a letter or digit.
/// A name a token cannot have names a fleet nobody can reach.
pub fn fleet_name(text: &str) -> Result<String, String> {
    let mut chars = text.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if first_ok && rest_ok && text.len() <= 63 {
        Ok(text.to_owned())
    } else {
        Err("a fleet name is 1 to 63 ASCII letters, digits, `.`, `_` and `-`, starting with a letter or digit".into())
    }
}

/// A name the ledger shows (a token's subject, a reader login): the rule of
/// every identifier (1 to 256 printable characters, none of them an
/// invisible formatting character).
pub(super) fn identifier(text: &str) -> Result<String, String> {
    crate::ledger::validate::label("name", text).map(|()| text.to_owned()).map_err(|e| e.to_string())
}

/// A Temporal list filter of `temporal link` (the `CHECK` of
/// `temporal_links.query` says the same): 1 to 8,000 characters.
pub(super) fn list_filter(text: &str) -> Result<String, String> {
    match text.chars().count() {
        1..=8000 => Ok(text.to_owned()),
        n => Err(format!("a list filter is 1 to 8,000 characters, not {n}")),
    }
}

/// A time a token may expire at: RFC 3339, and in the future.
pub(super) fn future_time(text: &str) -> Result<DateTime<Utc>, String> {
    let at = DateTime::parse_from_rfc3339(text.trim())
        .map_err(|e| format!("`{text}` is not an RFC 3339 time like 2027-01-31T18:00:00Z ({e})"))?
        .to_utc();
    if at <= Utc::now() {
        return Err(format!("`{text}` is not in the future: a token must expire after it is minted"));
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleet_names_follow_the_token_rule() {
        for ok in ["default", "a", "Fleet-1.b_c", &"x".repeat(63)] {
            assert!(fleet_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", ".a", "a b", "a\"b", "a\nb", "a\u{202E}b", "é", &"x".repeat(64), &"x".repeat(5000)] {
            assert!(fleet_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn list_filters_are_bounded() {
        assert!(list_filter("WorkflowType='MigrateUnit'").is_ok());
        assert!(list_filter(&"q".repeat(8000)).is_ok());
        for bad in ["", &"q".repeat(8001)] {
            assert!(list_filter(bad).is_err(), "{} characters", bad.len());
        }
    }

    #[test]
    fn names_follow_the_identifier_rule() {
        assert!(identifier("agent-7").is_ok());
        for bad in ["", "a\u{202E}b", "a\u{FEFF}", "a\nb", &"n".repeat(257)] {
            assert!(identifier(bad).is_err(), "{bad:?}");
        }
    }
}
