//! The input rules of SPEC §9. Each check names the argument and the rule, so
//! that a refused request tells the agent exactly what to change.

use super::LedgerError;

pub const MAX_REGISTER_BATCH: usize = 1000;
pub const MAX_PAGE: i32 = 500;
pub const DEFAULT_PAGE: i32 = 100;
pub const MAX_TEXT: usize = 8000;
pub const MAX_URL: usize = 2048;
pub const LEASE_SECONDS: std::ops::RangeInclusive<i32> = 30..=86_400;
pub const DEFAULT_LEASE_SECONDS: i32 = 900;
pub const MAX_CENTS: i64 = 1_000_000_000;
const MAX_SHORT: usize = 256;

fn printable(s: &str) -> bool {
    !s.chars().any(char::is_control)
}

/// 1..=`max` printable characters.
pub fn short_text(argument: &str, value: &str, max: usize) -> Result<(), LedgerError> {
    let len = value.chars().count();
    if len == 0 || len > max || !printable(value) {
        return Err(LedgerError::invalid(
            argument,
            format!("must be 1 to {max} printable characters (got {len} characters)"),
        ));
    }
    Ok(())
}

/// The dates a client may send: years 1 to 9999. PostgreSQL's own range
/// starts in 4714 BC, but the reads do arithmetic on a bound (a week's
/// Monday, a day's end) that would leave that range near its edges; no
/// ledger date is older than the ledger.
pub const DATES: &str = "0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z";

fn in_date_range(at: chrono::DateTime<chrono::Utc>) -> bool {
    use chrono::Datelike;
    (1..=9999).contains(&at.year())
}

/// A time range `[from, until)`: each bound within [`DATES`], `from` (named
/// `from_arg`) not after `until` (`until_arg`).
pub fn range(from_arg: &str, until_arg: &str, range: &crate::db::reads::Range) -> Result<(), LedgerError> {
    for (argument, bound) in [(from_arg, range.from), (until_arg, range.until)] {
        if bound.is_some_and(|at| !in_date_range(at)) {
            return Err(LedgerError::invalid(argument, format!("must be a date from {DATES}")));
        }
    }
    match (range.from, range.until) {
        (Some(from), Some(until)) if from > until => Err(LedgerError::invalid(
            until_arg,
            format!("must not be before `{from_arg}` (a range is [{from_arg}, {until_arg}))"),
        )),
        _ => Ok(()),
    }
}

pub fn external_ref(argument: &str, value: &str) -> Result<(), LedgerError> {
    short_text(argument, value, MAX_SHORT)?;
    visible(argument, value)
}

pub fn label(argument: &str, value: &str) -> Result<(), LedgerError> {
    short_text(argument, value, MAX_SHORT)?;
    visible(argument, value)
}

/// Invisible formatting characters: Unicode's `Cf` (format: bidirectional
/// overrides and isolates, zero-width characters, the soft hyphen, the byte
/// order mark, tag characters, ...), `Zl` and `Zp` (line and paragraph
/// separators). In text that people read (GraphiQL, Grafana) they make one
/// string display as another: `report.pdf` with U+202E inside is another link.
fn is_invisible_formatting(c: char) -> bool {
    use unicode_general_category::{GeneralCategory, get_general_category};
    !c.is_ascii()
        && matches!(
            get_general_category(c),
            GeneralCategory::Format | GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator
        )
}

/// Refuses text that holds an invisible formatting character.
pub fn visible(argument: &str, value: &str) -> Result<(), LedgerError> {
    match value.chars().find(|&c| is_invisible_formatting(c)) {
        Some(c) => Err(LedgerError::invalid(
            argument,
            format!(
                "must not hold invisible formatting characters (found U+{:04X}: bidirectional controls, \
                 zero-width and other Unicode format characters and line or paragraph separators change how \
                 the text displays); remove them",
                c as u32
            ),
        )),
        None => Ok(()),
    }
}

/// Free text people write (a question): as [`visible`], except that the
/// zero-width non-joiner and joiner (U+200C, U+200D) may stand between two
/// visible characters, where they shape the text rather than hide it:
/// Persian and other scripts need the non-joiner inside words (می‌خواهم),
/// and emoji sequences are joined by the joiner (👩‍💻). At an edge, next to a
/// space or another invisible character they are refused as before.
pub fn visible_text(argument: &str, value: &str) -> Result<(), LedgerError> {
    let chars: Vec<char> = value.chars().collect();
    let shapes = |i: usize| {
        let shown = |c: &char| !c.is_whitespace() && !is_invisible_formatting(*c);
        i > 0 && chars.get(i - 1).is_some_and(shown) && chars.get(i + 1).is_some_and(shown)
    };
    let hidden = chars
        .iter()
        .enumerate()
        .find(|&(i, &c)| is_invisible_formatting(c) && !(matches!(c, '\u{200C}' | '\u{200D}') && shapes(i)));
    match hidden {
        Some((_, &c)) => visible(argument, &c.to_string()),
        None => Ok(()),
    }
}

/// A read filter (`domain`, `claimedBy`, `agentId`, `assigneeGroup`): the
/// same rule as the labels it matches, so that what could never be stored
/// (NUL, control characters) never reaches the database either.
pub fn filter(argument: &str, value: Option<&str>) -> Result<(), LedgerError> {
    match value {
        Some(value) => label(argument, value),
        None => Ok(()),
    }
}

/// Questions, answers and reasons: 1..=8000 characters, printable apart from
/// line breaks and tabs (NUL and other control characters are refused: they
/// have no place in text, and PostgreSQL cannot store NUL).
pub fn long_text(argument: &str, value: &str) -> Result<(), LedgerError> {
    let len = value.chars().count();
    let printable = !value.chars().any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'));
    if value.trim().is_empty() || len > MAX_TEXT || !printable {
        return Err(LedgerError::invalid(
            argument,
            format!(
                "must be non-blank, at most {MAX_TEXT} characters (got {len}), and printable apart from line breaks \
                 and tabs"
            ),
        ));
    }
    Ok(())
}

/// An absolute http(s) URL of at most 2048 characters: links only, never payloads.
pub fn evidence_url(value: &str) -> Result<(), LedgerError> {
    let rule = || {
        LedgerError::invalid(
            "evidenceUrl",
            format!("must be an absolute http(s) URL of at most {MAX_URL} characters (links only, never payloads)"),
        )
    };
    if value.len() > MAX_URL || !printable(value) || value.contains(char::is_whitespace) {
        return Err(rule());
    }
    visible("evidenceUrl", value)?;
    match url::Url::parse(value) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host_str().is_some_and(|h| !h.is_empty()) => Ok(()),
        _ => Err(rule()),
    }
}

pub fn lease_seconds(value: Option<i32>) -> Result<i32, LedgerError> {
    let seconds = value.unwrap_or(DEFAULT_LEASE_SECONDS);
    if !LEASE_SECONDS.contains(&seconds) {
        return Err(LedgerError::invalid(
            "leaseSeconds",
            format!("must be between {} and {} (got {seconds})", LEASE_SECONDS.start(), LEASE_SECONDS.end()),
        ));
    }
    Ok(seconds)
}

pub fn cents(value: i64) -> Result<(), LedgerError> {
    if !(0..=MAX_CENTS).contains(&value) {
        return Err(LedgerError::invalid("cents", format!("must be between 0 and {MAX_CENTS} (got {value})")));
    }
    Ok(())
}

pub fn idempotency_key(value: Option<&str>) -> Result<(), LedgerError> {
    match value {
        Some(key) => short_text("idempotencyKey", key, MAX_SHORT).and_then(|()| visible("idempotencyKey", key)),
        None => Ok(()),
    }
}

pub fn first(value: Option<i32>) -> Result<i32, LedgerError> {
    let first = value.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&first) {
        return Err(LedgerError::invalid("first", format!("must be between 1 and {MAX_PAGE} (got {first})")));
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_urls_must_be_absolute_http_links() {
        assert!(evidence_url("https://git.example/commit/abc").is_ok());
        assert!(evidence_url("http://ci.local:8080/run/1").is_ok());
        for bad in ["ftp://x/y", "/relative", "https://", "data:text/plain,hi", "https://a b", ""] {
            assert!(evidence_url(bad).is_err(), "{bad} accepted");
        }
        assert!(evidence_url(&format!("https://x/{}", "a".repeat(MAX_URL))).is_err());
    }

    #[test]
    fn invisible_formatting_characters_are_refused() {
        for c in ['\u{202A}', '\u{202E}', '\u{2066}', '\u{2069}', '\u{200B}', '\u{200F}'] {
            assert!(external_ref("externalRef", &format!("a{c}b")).is_err(), "U+{:04X}", c as u32);
            assert!(visible("question", &format!("a{c}b")).is_err(), "U+{:04X}", c as u32);
        }
        for ok in ["plain", "שלום", "naïve", "a\u{2010}b", "a\u{2070}b", "ID-\u{3000}x"] {
            assert!(visible("question", ok).is_ok(), "{ok}");
        }
        // The list (23): Arabic letter mark, BOM, word joiner, soft
        // hyphen, Mongolian vowel separator, line separator, language tag.
        for c in ['\u{061C}', '\u{FEFF}', '\u{2060}', '\u{00AD}', '\u{180E}', '\u{2028}', '\u{2029}', '\u{E0001}'] {
            assert!(external_ref("externalRef", &format!("a{c}b")).is_err(), "U+{:04X}", c as u32);
            assert!(evidence_url(&format!("https://x.example/a{c}b")).is_err(), "U+{:04X}", c as u32);
        }
    }

    #[test]
    fn questions_may_join_and_non_join_between_visible_characters() {
        for ok in ["\u{645}\u{6cc}\u{200C}\u{62e}\u{648}\u{627}\u{647}\u{645}", "👩\u{200D}💻 ready?", "a\u{200D}b"]
        {
            assert!(visible_text("question", ok).is_ok(), "{ok:?}");
            // Identifiers stay strict: "a\u{200D}b" would display as "ab".
            assert!(visible("externalRef", ok).is_err(), "{ok:?}");
        }
        for bad in [
            "\u{200D}lead",
            "trail\u{200C}",
            "a \u{200D}b",
            "a\u{200C} b",
            "a\u{200D}\u{200D}b",
            "a\u{200B}b",
            "a\u{202E}b",
            "a\u{200D}\u{202E}b",
        ] {
            assert!(visible_text("question", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn external_refs_are_printable_and_bounded() {
        assert!(external_ref("externalRef", &"é".repeat(256)).is_ok());
        assert!(external_ref("externalRef", &"a".repeat(257)).is_err());
        assert!(external_ref("externalRef", "").is_err());
        assert!(external_ref("externalRef", "a\u{7}b").is_err());
    }

    #[test]
    fn long_texts_allow_line_breaks_and_refuse_other_control_characters() {
        assert!(long_text("question", "which schema?\nv1 or v2\t(see above)\r\n").is_ok());
        for bad in ["a\0b", "\u{1b}[31m", "\u{7f}", "\u{85}", " \n "] {
            assert!(long_text("question", bad).is_err(), "{bad:?} accepted");
        }
        assert!(filter("filter.domain", Some("a\0")).is_err());
        assert!(filter("filter.domain", None).is_ok());
    }

    #[test]
    fn lease_bounds() {
        assert_eq!(lease_seconds(None).ok(), Some(900));
        assert!(lease_seconds(Some(29)).is_err());
        assert!(lease_seconds(Some(86_401)).is_err());
        assert_eq!(lease_seconds(Some(30)).ok(), Some(30));
    }
}
