//! Durations as operators write them on the command line and in requests: `30m`, `1h`, `7d`.

/// `1h`, `30m`, `45s`, `7d`, `2w` as seconds.
pub fn parse_ttl(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (n, unit) = text.split_at(split);
    let n: i64 = n
        .parse()
        .map_err(|_| format!("`{text}` is not a duration; write 30m, 1h, 7d"))?;
    let per = match unit {
        "s" => 1,
        "m" => 60,
        "h" | "" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return Err(format!("`{unit}` is not a unit; use s, m, h, d or w")),
    };
    match n.checked_mul(per) {
        Some(s) if s > 0 => Ok(s),
        _ => Err(format!("`{text}` must be more than zero and reasonable")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl() {
        assert_eq!(parse_ttl("1h"), Ok(3600));
        assert_eq!(parse_ttl("30m"), Ok(1800));
        assert_eq!(parse_ttl("7d"), Ok(7 * 86_400));
        assert!(parse_ttl("0s").is_err());
        assert!(parse_ttl("1y").is_err());
        assert!(parse_ttl("h").is_err());
        assert!(parse_ttl("99999999999999999w").is_err());
    }
}
