//! Value conversions: the units Uniffle and Celeborn write, to the units
//! Switchyard reads.
//!
//! Both upstream projects parse sizes and durations with the rules of
//! Spark's `JavaUtils` (Uniffle copies them into `UnitConverter`, Celeborn
//! uses `Utils.byteStringAsBytes` / `timeStringAs`): a whole number with an
//! optional lower- or upper-case suffix, sizes in binary units. Switchyard's
//! `bytesize` reads `"10g"` as 10^9 bytes, so sizes are always written back
//! with an explicit binary unit (`"10 GiB"`), never copied as text.

use std::time::Duration;

/// Byte suffixes of Spark's `JavaUtils.byteStringAs` (and Uniffle's
/// `UnitConverter`, its copy): all binary, `b` being bytes.
const SIZE_SUFFIXES: &[(&str, u64)] = &[
    ("b", 1),
    ("k", 1 << 10),
    ("kb", 1 << 10),
    ("m", 1 << 20),
    ("mb", 1 << 20),
    ("g", 1 << 30),
    ("gb", 1 << 30),
    ("t", 1 << 40),
    ("tb", 1 << 40),
    ("p", 1 << 50),
    ("pb", 1 << 50),
];

/// Time suffixes of Spark's `JavaUtils.timeStringAs` (`m` is minutes).
const TIME_SUFFIXES: &[(&str, Duration)] = &[
    ("us", Duration::from_micros(1)),
    ("ms", Duration::from_millis(1)),
    ("s", Duration::from_secs(1)),
    ("m", Duration::from_secs(60)),
    ("min", Duration::from_secs(60)),
    ("h", Duration::from_secs(3600)),
    ("d", Duration::from_secs(86_400)),
];

const SIZE_HINT: &str = "a size such as 1073741824, 1024k, 512m, 10g or 10gb (binary units)";
const TIME_HINT: &str = "a duration such as 60000 (ms), 500ms, 120s, 10min, 10m, 1h or 1d";

/// Why an upstream value is not what its key takes; the text goes into the
/// import report after the key and value.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ValueError {
    /// Not of the expected form, which the text names.
    #[error("not {0}")]
    Not(&'static str),
    #[error("fractions are not supported, as in Uniffle and Celeborn: expected {SIZE_HINT}")]
    Fraction,
    #[error("unknown size suffix {0:?}: expected {SIZE_HINT}")]
    SizeSuffix(String),
    #[error("unknown time suffix {0:?}: expected {TIME_HINT}")]
    TimeSuffix(String),
    #[error("too large: {0:?}")]
    TooLarge(String),
    #[error("negative: expected {TIME_HINT}")]
    NegativeDuration,
    #[error("zero: expected a positive duration, {TIME_HINT}")]
    ZeroDuration,
    #[error("{0} is outside 0 to 100")]
    Percent(f64),
}

/// Splits `"512m"` into `("512", "m")`, lower-cased and trimmed, as
/// upstream's `([0-9]+)([a-z]+)?` pattern does after `toLowerCase().trim()`.
fn number_and_suffix(text: &str) -> Option<(String, String)> {
    let lower = text.trim().to_ascii_lowercase();
    let split = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, suffix) = lower.split_at(split);
    if digits.is_empty() || !suffix.chars().all(|c| c.is_ascii_lowercase()) {
        return None;
    }
    Some((digits.to_string(), suffix.to_string()))
}

/// A size as Uniffle and Celeborn write it: `1073741824`, `1024k`, `512m`,
/// `10g`, `10gb`, `1t`, in bytes. Fractions (`1.5g`) are rejected, as
/// upstream rejects them, rather than guessed.
pub fn parse_size(text: &str) -> Result<u64, ValueError> {
    let (digits, suffix) = number_and_suffix(text).ok_or_else(|| {
        if text.contains('.') {
            ValueError::Fraction
        } else {
            ValueError::Not(SIZE_HINT)
        }
    })?;
    let factor = if suffix.is_empty() {
        1
    } else {
        SIZE_SUFFIXES
            .iter()
            .find(|(s, _)| *s == suffix)
            .map(|(_, f)| *f)
            .ok_or_else(|| ValueError::SizeSuffix(suffix.clone()))?
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| ValueError::TooLarge(text.to_string()))
}

/// Uniffle's capacities (`rss.server.buffer.capacity` and the like) are Java
/// longs where a negative number means "derive it" (from the JVM heap or the
/// disk size). `Ok(None)` is that case; anything else is a size.
pub fn parse_size_or_negative(text: &str) -> Result<Option<u64>, ValueError> {
    let t = text.trim();
    if let Some(rest) = t.strip_prefix('-') {
        if !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit()) {
            return Ok(None);
        }
    }
    parse_size(t).map(Some)
}

/// A duration as Celeborn writes it (`120s`, `10min`, `1h`, `300s`, `500ms`)
/// or as Uniffle writes its `...(ms)` keys (`60000`): a bare number is
/// milliseconds in both (Celeborn's `timeConf(TimeUnit.MILLISECONDS)`,
/// Uniffle's long millisecond options). Zero and negative values are
/// rejected: no Switchyard duration imported here may be zero.
pub fn parse_duration(text: &str) -> Result<Duration, ValueError> {
    if text.trim().starts_with('-') {
        return Err(ValueError::NegativeDuration);
    }
    let (digits, suffix) = number_and_suffix(text).ok_or(ValueError::Not(TIME_HINT))?;
    let unit = if suffix.is_empty() {
        Duration::from_millis(1)
    } else {
        TIME_SUFFIXES
            .iter()
            .find(|(s, _)| *s == suffix)
            .map(|(_, u)| *u)
            .ok_or_else(|| ValueError::TimeSuffix(suffix.clone()))?
    };
    let too_large = || ValueError::TooLarge(text.to_string());
    let n: u32 = digits.parse().map_err(|_| too_large())?;
    let d = unit.checked_mul(n).ok_or_else(too_large)?;
    if d.is_zero() {
        return Err(ValueError::ZeroDuration);
    }
    Ok(d)
}

/// A percentage as Uniffle writes its watermarks (`75.0`), as the fraction
/// Switchyard wants (`0.75`). Rounded to 6 decimals so that `33.3` becomes
/// `0.333`, not `0.33299999999999996`.
pub fn parse_percent(text: &str) -> Result<f64, ValueError> {
    let p: f64 = text
        .trim()
        .parse()
        .map_err(|_| ValueError::Not("a percentage such as 75.0"))?;
    if !(0.0..=100.0).contains(&p) {
        return Err(ValueError::Percent(p));
    }
    Ok((p / 100.0 * 1e6).round() / 1e6)
}

/// A TCP port. 0 (any free port) is kept: Celeborn's worker ports default to
/// it, and Switchyard then advertises whatever port it bound.
pub fn parse_port(text: &str) -> Result<u16, ValueError> {
    text.trim()
        .parse()
        .map_err(|_| ValueError::Not("a port number from 0 to 65535"))
}

/// A positive count (threads, servers).
pub fn parse_count(text: &str) -> Result<u64, ValueError> {
    match text.trim().parse::<u64>() {
        Ok(0) | Err(_) => Err(ValueError::Not("a positive whole number")),
        Ok(n) => Ok(n),
    }
}

/// `true` or `false`, in any case, as Uniffle's and Celeborn's boolean options.
pub fn parse_bool(text: &str) -> Result<bool, ValueError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ValueError::Not("true or false")),
    }
}

/// A comma list (`/data1/rss,/data2/rss`), trimmed, empty items dropped.
pub fn parse_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// A size in the exact binary unit `bytesize` reads back to the same number
/// of bytes: the largest of PiB..KiB that divides it, else bytes.
pub fn size_string(bytes: u64) -> String {
    for (factor, unit) in [
        (1u64 << 50, "PiB"),
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ] {
        if bytes >= factor && bytes.is_multiple_of(factor) {
            return format!("{} {unit}", bytes / factor);
        }
    }
    format!("{bytes} B")
}

/// A duration in the largest `humantime` unit that divides it exactly
/// (`"2m"`, `"90s"`, `"1500ms"`), so nothing is rounded.
pub fn duration_string(d: Duration) -> String {
    let nanos = d.as_nanos();
    for (factor, unit) in [
        (86_400_000_000_000u128, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
    ] {
        if nanos >= factor && nanos.is_multiple_of(factor) {
            return format!("{}{unit}", nanos / factor);
        }
    }
    format!("{nanos}ns")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytesize::ByteSize;

    #[test]
    fn sizes_in_upstream_units() {
        for (text, bytes) in [
            ("1073741824", 1u64 << 30),
            ("10g", 10 << 30),
            ("10gb", 10 << 30),
            ("10G", 10 << 30),
            ("40gb", 40 << 30),
            ("512m", 512 << 20),
            ("64M", 64 << 20),
            ("1024k", 1 << 20),
            ("256k", 256 << 10),
            ("256kb", 256 << 10),
            ("1t", 1 << 40),
            ("5G", 5 << 30),
            ("100b", 100),
            (" 129m ", 129 << 20),
            ("0", 0),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
        for bad in [
            "abc",
            "",
            "10 g",
            "1.5g",
            "10x",
            "-1",
            "g",
            "99999999999999p",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} parsed");
        }
        assert!(parse_size("1.5g")
            .unwrap_err()
            .to_string()
            .contains("fractions"));
    }

    #[test]
    fn negative_capacities_mean_derived() {
        assert_eq!(parse_size_or_negative("-1"), Ok(None));
        assert_eq!(parse_size_or_negative(" -1 "), Ok(None));
        assert_eq!(parse_size_or_negative("40g"), Ok(Some(40 << 30)));
        assert!(parse_size_or_negative("-").is_err());
        assert!(parse_size_or_negative("-1g").is_err());
        assert!(parse_size_or_negative("abc").is_err());
    }

    #[test]
    fn durations_in_upstream_units() {
        for (text, d) in [
            ("60000", Duration::from_secs(60)),
            ("120000", Duration::from_secs(120)),
            ("120s", Duration::from_secs(120)),
            ("10min", Duration::from_secs(600)),
            ("10m", Duration::from_secs(600)),
            ("1h", Duration::from_secs(3600)),
            ("300s", Duration::from_secs(300)),
            ("240S", Duration::from_secs(240)),
            ("1500ms", Duration::from_millis(1500)),
            ("2d", Duration::from_secs(172_800)),
            ("250us", Duration::from_micros(250)),
        ] {
            assert_eq!(parse_duration(text), Ok(d), "{text}");
        }
        for bad in ["", "abc", "10 min", "1.5s", "-1", "0", "0s", "10w", "s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn percent_becomes_a_ratio() {
        assert_eq!(parse_percent("75.0"), Ok(0.75));
        assert_eq!(parse_percent("25"), Ok(0.25));
        assert_eq!(parse_percent("33.3"), Ok(0.333));
        assert_eq!(parse_percent("100"), Ok(1.0));
        assert_eq!(parse_percent("0"), Ok(0.0));
        assert!(parse_percent("101").is_err());
        assert!(parse_percent("-5").is_err());
        assert!(parse_percent("0.75x").is_err());
        assert!(parse_percent("NaN").is_err());
    }

    #[test]
    fn ports_counts_bools_and_lists() {
        assert_eq!(parse_port("19999"), Ok(19999));
        assert_eq!(parse_port("0"), Ok(0));
        assert!(parse_port("65536").is_err());
        assert!(parse_port("-1").is_err());
        assert_eq!(parse_count("13"), Ok(13));
        assert!(parse_count("0").is_err());
        assert!(parse_count("x").is_err());
        assert_eq!(parse_bool("TRUE"), Ok(true));
        assert_eq!(parse_bool("false"), Ok(false));
        assert!(parse_bool("yes").is_err());
        assert_eq!(
            parse_list(" /a, /b ,,/c,"),
            vec!["/a".to_string(), "/b".to_string(), "/c".to_string()]
        );
        assert!(parse_list(" , ").is_empty());
    }

    /// What is written must read back, through Switchyard's own parsers, as
    /// exactly the bytes and time that were read.
    #[test]
    fn written_values_read_back_exactly() {
        for bytes in [
            0,
            100,
            1 << 10,
            256 << 10,
            129 << 20,
            (1 << 30) + 1,
            40 << 30,
            1 << 40,
            3 << 50,
        ] {
            let text = size_string(bytes);
            assert_eq!(text.parse::<ByteSize>().unwrap().as_u64(), bytes, "{text}");
        }
        assert_eq!(size_string(40 << 30), "40 GiB");
        assert_eq!(size_string(1000), "1000 B");
        for d in [
            Duration::from_secs(120),
            Duration::from_secs(90),
            Duration::from_millis(1500),
            Duration::from_secs(3600),
            Duration::from_secs(86_400 * 2),
            Duration::from_micros(250),
        ] {
            let text = duration_string(d);
            assert_eq!(humantime_serde::re::humantime::parse_duration(&text), Ok(d));
        }
        assert_eq!(duration_string(Duration::from_secs(120)), "2m");
        assert_eq!(duration_string(Duration::from_secs(90)), "90s");
    }
}
