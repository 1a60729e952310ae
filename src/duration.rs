//! Durations as people write them on a command line: `250ms`, `90s`, `15m`,
//! `12h`, `30d`, or a plain number of seconds.

use std::time::Duration;

/// A positive duration.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: f64 = number.parse().map_err(|_| format!("`{text}` is not a duration like 90s, 15m or 30d"))?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86_400.0,
        other => return Err(format!("unknown unit `{other}`: use ms, s, m, h or d")),
    };
    if !(seconds > 0.0 && seconds < 1e9) {
        return Err(format!("`{text}` must be more than zero (and under 30 years)"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// A duration as [`parse`] reads it, in its largest whole unit (`30d`, `90s`).
pub fn display(duration: Duration) -> String {
    let millis = duration.as_millis();
    [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1000, "s")]
        .into_iter()
        .find(|(unit, _)| millis.is_multiple_of(*unit))
        .map_or_else(|| format!("{millis}ms"), |(unit, name)| format!("{}{name}", millis / unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("12h"), Ok(Duration::from_secs(12 * 3600)));
        assert_eq!(parse("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert!(parse("0s").is_err());
        assert!(parse("5w").is_err());
        assert!(parse("soon").is_err());
    }

    #[test]
    fn durations_read_back() {
        for text in ["30d", "12h", "90s", "250ms", "36h", "15m"] {
            assert_eq!(display(parse(text).expect(text)), text);
        }
    }
}
