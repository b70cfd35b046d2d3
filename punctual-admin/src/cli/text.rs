//! The command line's text for people: tables with aligned columns, and
//! what a store holds (ids, names, errors) made harmless for a terminal.

/// `text` with its control characters written as escapes (`\u{1b}`),
/// line breaks and tabs apart: what an entry's id, a schedule's name or a
/// handler's error holds must not drive the terminal it is printed on.
pub(super) fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` as one word a POSIX shell reads back as it is: plain when it
/// is only letters, digits and `@%_+=:,./-`, else in single quotes (a
/// Redis id such as `#24` would start a comment, and the shell would cut
/// it).
pub(super) fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "@%_+=:,./-".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

pub(super) fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| (*c).to_owned()).collect()
}

/// `text` cut to `max` characters (an ellipsis marks the cut), on one line,
/// [`printable`].
pub(super) fn clip(text: &str, max: usize) -> String {
    let one_line = printable(&text.replace(['\n', '\r', '\t'], " "));
    if one_line.chars().count() <= max {
        one_line
    } else {
        let cut: String = one_line.chars().take(max - 1).collect();
        format!("{cut}…")
    }
}

/// Rows as aligned columns, those in `right` aligned right (numbers).
pub(super) fn table(rows: &[Vec<String>], right: &[usize]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c > 0 {
                line.push_str("  ");
            }
            if right.contains(&c) {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                if c + 1 < r.len() {
                    line.push_str(&" ".repeat(pad));
                }
            }
        }
        out.push(line);
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_a_shell_would_cut_are_quoted() {
        assert_eq!(shell_word("order-001"), "order-001");
        assert_eq!(shell_word("redis@2:jobs"), "redis@2:jobs");
        assert_eq!(shell_word("#24"), "'#24'");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn tables_align_numbers_right() {
        let rows = vec![row(&["Q", "N"]), row(&["jobs", "1,000"]), row(&["a", "7"])];
        assert_eq!(table(&rows, &[1]), "Q         N\njobs  1,000\na         7");
    }
}
