//! docs/SPEC.md's table of where rows sit (section 1a) is the crate's
//! table, `pd_stitch::places::all()`: each place once, in its order, with
//! the object that holds it, the key, and what it holds.

use pd_stitch::places::{self, Holder, Holds, Place, RowsKind};

/// A place as the SPEC's table writes it: object, key, what it holds.
fn row(place: &Place) -> (String, String, &'static str) {
    let object = match place.holder {
        Holder::Choice => "choices[i]".to_owned(),
        Holder::ChoiceMember(member) => format!("choices[i].{member}"),
        Holder::Member(member) => member.to_owned(),
    };
    let holds = match place.holds {
        Holds::Rows(RowsKind::Inline) => "inline rows",
        Holds::Rows(RowsKind::ByHandle) => "rows by handle",
        Holds::Rows(RowsKind::Sglang) => "SGLang rows",
        Holds::Count => "count",
    };
    (object, place.key.to_owned(), holds)
}

/// The rows of the table of section 1a: (object, key, holds), backticks
/// taken off.
fn spec_rows(spec: &str) -> Vec<(String, String, String)> {
    let start = spec.find("\n## 1a.").expect("SPEC has section 1a");
    let section = &spec[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<String> = line
                .trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().trim_matches('`').to_owned())
                .collect();
            assert!(cells.len() >= 3, "{line}");
            (cells[0].clone(), cells[1].clone(), cells[2].clone())
        })
        .collect()
}

#[test]
fn the_spec_s_table_of_places_is_the_crate_s() {
    let spec =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/SPEC.md")).unwrap();
    let mut crate_rows: Vec<(String, String, String)> = Vec::new();
    for place in places::all() {
        let (object, key, holds) = row(place);
        let row = (object, key, holds.to_owned());
        if !crate_rows.contains(&row) {
            crate_rows.push(row);
        }
    }
    assert!(crate_rows.len() > 5, "{crate_rows:?}");
    assert_eq!(spec_rows(&spec), crate_rows);
}

/// The SPEC's table is read from section 1a alone: a table of another
/// section is not taken for it.
#[test]
fn the_table_is_read_from_section_1a_alone() {
    let spec = "# x\n\n## 1a. Where\n\n| object | key | holds |\n|---|---|---|\n\
                | `choices[i]` | `payload` | rows by handle |\n\n## 2. Next\n\n\
                | `nvext` | `routed_experts` | inline rows |\n";
    assert_eq!(
        spec_rows(spec),
        [(
            "choices[i]".into(),
            "payload".into(),
            "rows by handle".into()
        )]
    );
}
