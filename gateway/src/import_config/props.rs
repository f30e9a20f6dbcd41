//! Reading `celeborn-defaults.conf`, `server.conf` and `coordinator.conf`.
//!
//! All three are loaded upstream with `java.util.Properties.load` (Celeborn's
//! `Utils.getPropertiesFromFile`, Uniffle's `RssUtils.getPropertiesFromFile`),
//! and values are trimmed afterwards. So the rules here are Java's: `key
//! value`, `key=value` or `key: value`; `#` or `!` starts a comment line; a
//! line ending in an odd number of backslashes continues on the next; the
//! usual backslash escapes; a key given twice keeps its last value.

/// One `key value` line of an input file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Property {
    pub key: String,
    pub value: String,
    /// 1-based line where the (logical) line starts, for messages.
    pub line: usize,
}

/// A key given more than once; Java keeps the last value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    pub key: String,
    pub lines: Vec<usize>,
}

/// The properties of one file, in file order, each key once (its last
/// value), and the keys that were given more than once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Properties {
    pub entries: Vec<Property>,
    pub duplicates: Vec<Duplicate>,
}

/// Parses a properties text with `java.util.Properties.load`'s rules
/// (values then trimmed, as both upstream loaders do).
pub fn parse(text: &str) -> Properties {
    let mut all: Vec<Property> = Vec::new();
    for (line, logical) in logical_lines(text) {
        if let Some((key, value)) = parse_line(&logical) {
            all.push(Property { key, value, line });
        }
    }
    let mut out = Properties::default();
    for p in all {
        match out.entries.iter().position(|e| e.key == p.key) {
            Some(i) => {
                let first = out.entries.remove(i);
                match out.duplicates.iter_mut().find(|d| d.key == p.key) {
                    Some(d) => d.lines.push(p.line),
                    None => out.duplicates.push(Duplicate {
                        key: p.key.clone(),
                        lines: vec![first.line, p.line],
                    }),
                }
                out.entries.push(p);
            }
            None => out.entries.push(p),
        }
    }
    out.entries.sort_by_key(|e| e.line);
    out
}

/// Joins continuation lines (an odd number of trailing backslashes), with
/// the next line's leading whitespace dropped, and skips blank and comment
/// lines. Yields the starting line number of each logical line.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let piece = match &current {
            Some(_) => raw.trim_start(),
            None => {
                let t = raw.trim_start();
                if t.is_empty() || t.starts_with('#') || t.starts_with('!') {
                    continue;
                }
                t
            }
        };
        let trailing = piece.chars().rev().take_while(|&c| c == '\\').count();
        let continues = trailing % 2 == 1;
        let piece = if continues {
            &piece[..piece.len() - 1]
        } else {
            piece
        };
        match &mut current {
            Some((_, acc)) => acc.push_str(piece),
            None => current = Some((line_no, piece.to_string())),
        }
        if !continues {
            out.extend(current.take());
        }
    }
    out.extend(current.take());
    out
}

/// Splits one logical line into key and value: the key ends at the first
/// unescaped `=`, `:` or whitespace; then whitespace, at most one `=` or
/// `:`, and whitespace again are skipped. A line with only a key has an
/// empty value, as in Java.
fn parse_line(line: &str) -> Option<(String, String)> {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let mut key_end = chars.len();
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '=' | ':' => {
                key_end = i;
                break;
            }
            c if c.is_whitespace() => {
                key_end = i;
                break;
            }
            _ => i += 1,
        }
    }
    let key_end = key_end.min(chars.len());
    let mut j = key_end;
    while j < chars.len() && chars[j].is_whitespace() {
        j += 1;
    }
    if j < chars.len() && (chars[j] == '=' || chars[j] == ':') {
        j += 1;
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
    }
    let key = unescape(&chars[..key_end]);
    if key.is_empty() {
        return None;
    }
    let value = unescape(&chars[j.min(chars.len())..]);
    Some((key, value.trim().to_string()))
}

/// Java's escapes: `\t \n \r \f`, `\uXXXX`, and `\x` for any other `x`.
fn unescape(chars: &[char]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '\\' || i + 1 == chars.len() {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let c = chars[i + 1];
        i += 2;
        match c {
            't' => out.push('\t'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            'f' => out.push('\u{c}'),
            'u' if i + 4 <= chars.len() => {
                let hex: String = chars[i..i + 4].iter().collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(ch) => {
                        out.push(ch);
                        i += 4;
                    }
                    None => out.push('u'),
                }
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(String, String)> {
        parse(text)
            .entries
            .into_iter()
            .map(|p| (p.key, p.value))
            .collect()
    }

    fn kv(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn separators_comments_and_blank_lines() {
        let text = "# a comment\n\
                    ! also a comment\n\
                    \n\
                    rss.rpc.server.port 19999\n\
                    celeborn.master.port=9097\n\
                    a.b : c \n\
                    spaced.key   =   spaced value  \n\
                    \tindented\tvalue\n\
                    only.key\n\
                    celeborn.worker.storage.dirs                     /mnt/disk1,/mnt/disk2\n";
        assert_eq!(
            pairs(text),
            vec![
                kv("rss.rpc.server.port", "19999"),
                kv("celeborn.master.port", "9097"),
                kv("a.b", "c"),
                kv("spaced.key", "spaced value"),
                kv("indented", "value"),
                kv("only.key", ""),
                kv("celeborn.worker.storage.dirs", "/mnt/disk1,/mnt/disk2"),
            ]
        );
    }

    #[test]
    fn line_numbers_count_comments_and_blanks() {
        let p = parse("# c\n\na 1\n\n  b=2\n");
        let lines: Vec<_> = p.entries.iter().map(|e| (e.key.as_str(), e.line)).collect();
        assert_eq!(lines, vec![("a", 3), ("b", 5)]);
    }

    #[test]
    fn a_hash_inside_a_value_is_kept() {
        // Java only treats # as a comment at the start of a line.
        assert_eq!(
            pairs("k v#1 # not a comment"),
            vec![kv("k", "v#1 # not a comment")]
        );
    }

    #[test]
    fn continuations_and_escapes() {
        let text = "rss.storage.basePath /data1/rss,\\\n    /data2/rss\nk\\=ey v\\u0041\\tz\nw c:\\\\dir\n";
        assert_eq!(
            pairs(text),
            vec![
                kv("rss.storage.basePath", "/data1/rss,/data2/rss"),
                kv("k=ey", "vA\tz"),
                kv("w", "c:\\dir"),
            ]
        );
        // An even number of backslashes does not continue the line.
        assert_eq!(pairs("a x\\\\\nb y"), vec![kv("a", "x\\"), kv("b", "y")]);
    }

    #[test]
    fn the_last_of_a_repeated_key_wins() {
        let p = parse("a 1\nb 2\na 3\na 4\n");
        assert_eq!(
            p.entries
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str(), e.line))
                .collect::<Vec<_>>(),
            vec![("b", "2", 2), ("a", "4", 4)]
        );
        assert_eq!(
            p.duplicates,
            vec![Duplicate {
                key: "a".into(),
                lines: vec![1, 3, 4]
            }]
        );
    }

    #[test]
    fn windows_line_endings() {
        assert_eq!(pairs("a 1\r\nb=2\r\n"), vec![kv("a", "1"), kv("b", "2")]);
    }
}
