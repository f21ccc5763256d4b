//! Tables for human output: each column as wide as its widest cell (in
//! characters, not bytes), numbers right-aligned, the last column left
//! unpadded so long values do not drag trailing spaces.

use serde_json::Value;

/// Columns that hold numbers (right-aligned) are named in `numeric`.
pub(super) struct Table {
    headers: Vec<&'static str>,
    numeric: Vec<bool>,
    rows: Vec<Vec<String>>,
}

/// The gap between two columns.
const GAP: &str = "  ";

impl Table {
    /// `headers`, each `"NAME"` or `">NAME"` for a right-aligned (numeric) column.
    pub(super) fn new(headers: &[&'static str]) -> Table {
        let numeric = headers.iter().map(|h| h.starts_with('>')).collect();
        let headers = headers.iter().map(|h| h.trim_start_matches('>')).collect();
        Table { headers, numeric, rows: Vec::new() }
    }

    pub(super) fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.headers.len(), "a row has a cell per column");
        self.rows.push(cells);
    }

    /// The table as lines, without trailing spaces.
    pub(super) fn render(&self) -> String {
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|c| self.rows.iter().map(|r| r[c].chars().count()).chain([self.headers[c].chars().count()]).max().unwrap_or(0))
            .collect();
        let line = |cells: Vec<&str>| {
            let last = cells.len() - 1;
            let mut out = String::new();
            for (c, cell) in cells.into_iter().enumerate() {
                let pad = widths[c] - cell.chars().count();
                if c > 0 {
                    out.push_str(GAP);
                }
                if self.numeric[c] {
                    out.extend(std::iter::repeat_n(' ', pad));
                    out.push_str(cell);
                } else {
                    out.push_str(cell);
                    if c < last {
                        out.extend(std::iter::repeat_n(' ', pad));
                    }
                }
            }
            out.trim_end().to_string()
        };
        let mut out = line(self.headers.clone());
        for row in &self.rows {
            out.push('\n');
            out.push_str(&line(row.iter().map(String::as_str).collect()));
        }
        out
    }

    pub(super) fn print(&self) {
        println!("{}", self.render());
    }
}

/// A JSON value as a cell: strings without quotes, null as `-`.
pub(super) fn cell(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_and_numbers_align_right() {
        let mut table = Table::new(&["PK", ">VERSION", "VALUE"]);
        table.row(vec!["svc/api".into(), "4".into(), "{\"replicas\":3}".into()]);
        table.row(vec!["é".into(), "12345678901".into(), "x".into()]);
        let expected = [
            format!("PK{}VERSION  VALUE", " ".repeat(5 + 2 + 4)),
            format!("svc/api{}4  {{\"replicas\":3}}", " ".repeat(2 + 10)),
            format!("é{}12345678901  x", " ".repeat(6 + 2)),
        ];
        assert_eq!(table.render(), expected.join("\n"));
    }

    #[test]
    fn a_cell_shows_strings_bare_and_null_as_a_dash() {
        assert_eq!(cell(&serde_json::json!("a")), "a");
        assert_eq!(cell(&Value::Null), "-");
        assert_eq!(cell(&serde_json::json!(7)), "7");
    }
}
