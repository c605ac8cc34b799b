//! The algebra against a deliberately naive per-position model: intervals as
//! sets of positions, segments as maps from position to byte address.

use std::collections::{BTreeMap, BTreeSet};

use crate::support::config;
use pd_stitch::algebra::{cut, merge_segments, Dtype, MissingField, Rows, Segment};
use proptest::prelude::*;

/// Interval ends near 0 or near `u64::MAX`, so the sets stay small but the
/// arithmetic meets the top of the range.
fn point() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..40, (u64::MAX - 40)..=u64::MAX]
}

fn rows() -> impl Strategy<Value = Rows> {
    (point(), 0u64..20).prop_map(|(a, len)| {
        let start = a.min(u64::MAX - len);
        Rows::with_len(start, len).unwrap()
    })
}

fn set(rows: Option<Rows>) -> BTreeSet<u64> {
    rows.map_or_else(BTreeSet::new, |r| (r.start()..r.end()).collect())
}

fn dtype() -> impl Strategy<Value = Dtype> {
    proptest::sample::select(Dtype::ALL.to_vec())
}

/// Valid segments with short row counts, positions and offsets anywhere.
fn segment(
    field: &'static str,
    file: &'static str,
) -> impl Strategy<Value = Segment<&'static str>> {
    (
        point(),
        0u64..12,
        point(),
        dtype(),
        proptest::collection::vec(0u64..4, 0..3),
    )
        .prop_map(move |(pos, rows, offset, dtype, shape)| {
            let pos = pos.min(u64::MAX - rows);
            let row_bytes = dtype.itemsize() * shape.iter().product::<u64>();
            let offset = offset.min(u64::MAX - rows * row_bytes);
            Segment::new(field, file, offset, pos, rows, dtype, shape).unwrap()
        })
}

/// Position -> byte address of its row, spelled out position by position.
fn addresses<F>(seg: &Segment<F>) -> BTreeMap<u64, u128> {
    (0..seg.rows())
        .map(|i| {
            let address = u128::from(seg.offset()) + u128::from(i) * u128::from(seg.row_bytes());
            (seg.pos() + i, address)
        })
        .collect()
}

proptest! {
    #![proptest_config(config("algebra"))]

    #[test]
    fn rows_constructors_agree_with_wide_arithmetic(start in point(), end in point(), len in point()) {
        prop_assert_eq!(Rows::new(start, end).is_some(), start <= end);
        let wide_end = u128::from(start) + u128::from(len);
        match Rows::with_len(start, len) {
            Some(r) => {
                prop_assert_eq!(u128::from(r.end()), wide_end);
                prop_assert_eq!(r.len(), len);
                prop_assert_eq!(r.is_empty(), len == 0);
            }
            None => prop_assert!(wide_end > u128::from(u64::MAX)),
        }
    }

    #[test]
    fn intersection_is_set_intersection(a in rows(), b in rows()) {
        let expected: BTreeSet<u64> = set(Some(a)).intersection(&set(Some(b))).copied().collect();
        let got = a.intersection(b);
        prop_assert_eq!(got.is_none(), expected.is_empty());
        prop_assert_eq!(set(got), expected);
        prop_assert_eq!(a.intersection(b), b.intersection(a));
    }

    #[test]
    fn difference_is_set_difference_split_around_other(a in rows(), b in rows()) {
        let expected: BTreeSet<u64> = set(Some(a)).difference(&set(Some(b))).copied().collect();
        let (before, after) = a.difference(b);
        prop_assert!(before.is_none_or(|r| !r.is_empty()));
        prop_assert!(after.is_none_or(|r| !r.is_empty()));
        if let (Some(x), Some(y)) = (before, after) {
            prop_assert!(x.end() <= y.start(), "parts in order");
        }
        let mut got = set(before);
        got.extend(set(after));
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn contains_is_membership(a in rows(), x in point()) {
        prop_assert_eq!(a.contains(x), set(Some(a)).contains(&x));
    }

    /// Rows::clip_from keeps exactly the positions >= cut, and is None exactly
    /// when end <= cut (empty intervals past the cut survive, in place).
    #[test]
    fn rows_clip_from_keeps_positions_from_the_cut(a in rows(), cut in point()) {
        let got = a.clip_from(cut);
        prop_assert_eq!(got.is_none(), a.end() <= cut);
        let expected: BTreeSet<u64> = set(Some(a)).into_iter().filter(|&x| x >= cut).collect();
        prop_assert_eq!(set(got), expected);
        if let Some(kept) = got {
            prop_assert_eq!(kept.end(), a.end());
            prop_assert_eq!(kept.start(), a.start().max(cut));
        }
    }

    /// L4: clipping keeps the byte address of every kept position, and drops
    /// exactly the positions below the cut.
    #[test]
    fn l4_clip_preserves_byte_addresses(seg in segment("f", "d.bin"), cut in point()) {
        let before = addresses(&seg);
        match seg.clip_from(cut) {
            None => prop_assert!(seg.end() <= cut),
            Some(kept) => {
                let expected: BTreeMap<u64, u128> = before.into_iter().filter(|&(x, _)| x >= cut).collect();
                prop_assert_eq!(addresses(&kept), expected);
                prop_assert_eq!(kept.end(), seg.end());
                prop_assert_eq!(kept.byte_range().end, seg.byte_range().end);
                prop_assert_eq!((kept.field(), kept.file(), kept.dtype(), kept.shape()),
                                (seg.field(), seg.file(), seg.dtype(), seg.shape()));
                for x in kept.pos()..kept.end() {
                    prop_assert_eq!(kept.row_address(x), seg.row_address(x));
                }
            }
        }
    }

    /// L4: clipping twice is clipping once at the larger cut.
    #[test]
    fn l4_clip_twice_is_clip_once_at_the_larger_cut(seg in segment("f", "d.bin"), a in point(), b in point()) {
        prop_assert_eq!(seg.clip_from(a).and_then(|s| s.clip_from(b)), seg.clip_from(a.max(b)));
    }

    #[test]
    fn row_address_matches_the_naive_map(seg in segment("f", "d.bin"), x in point()) {
        let expected = addresses(&seg).get(&x).map(|&start| start..start + u128::from(seg.row_bytes()));
        let got = seg.row_address(x).map(|r| u128::from(r.start)..u128::from(r.end));
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn new_accepts_exactly_what_fits(pos in point(), rows in point(), offset in point(),
                                     dtype in dtype(), shape in proptest::collection::vec(prop_oneof![0u64..4, point()], 0..3)) {
        let row_bytes = shape.iter().fold(u128::from(dtype.itemsize()), |acc, &d| acc.saturating_mul(u128::from(d)));
        let fits = row_bytes <= u128::from(u64::MAX)
            && u128::from(pos) + u128::from(rows) <= u128::from(u64::MAX)
            && u128::from(offset) + u128::from(rows) * row_bytes <= u128::from(u64::MAX);
        let seg = Segment::new("f", (), offset, pos, rows, dtype, shape);
        prop_assert_eq!(seg.is_ok(), fits, "{:?}", seg);
    }

    /// merge_segments against the per-position model: position -> (file,
    /// byte address) of its row, the prefill's wherever it has one, the
    /// decode's from the cut on.
    #[test]
    fn merge_segments_matches_the_per_position_model(
        prefill in proptest::collection::vec(segment("f", "p.bin"), 1..4),
        decode in proptest::collection::vec(segment("f", "d.bin"), 0..4),
    ) {
        // The model needs one row per position and side; skip overlapping layouts.
        let disjoint = |segs: &[Segment<&str>]| {
            let mut seen = BTreeSet::new();
            segs.iter().all(|s| addresses(s).keys().all(|&x| seen.insert(x)))
        };
        prop_assume!(disjoint(&prefill) && disjoint(&decode));
        let cut_f = prefill.iter().map(Segment::end).max().unwrap();
        prop_assert_eq!(cut(&prefill).get("f"), Some(cut_f));

        let mut expected: BTreeMap<u64, (&str, u128)> = BTreeMap::new();
        for seg in &decode {
            for (x, a) in addresses(seg) {
                if x >= cut_f {
                    expected.insert(x, ("d.bin", a));
                }
            }
        }
        for seg in &prefill {
            for (x, a) in addresses(seg) {
                expected.insert(x, ("p.bin", a));
            }
        }

        let merged = merge_segments(&prefill, &decode).unwrap();
        prop_assert_eq!(&merged[..prefill.len()], &prefill[..]);
        let mut got = BTreeMap::new();
        for seg in &merged {
            for (x, a) in addresses(seg) {
                prop_assert!(got.insert(x, (*seg.file(), a)).is_none(), "position {} twice", x);
            }
        }
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn merge_segments_refuses_fields_the_prefill_lacks(
        prefill in proptest::collection::vec(segment("a", "p.bin"), 0..3),
        decode in segment("b", "d.bin"),
    ) {
        prop_assert_eq!(
            merge_segments(&prefill, &[decode]),
            Err(MissingField { field: "b".into() })
        );
    }
}

#[test]
fn cut_takes_the_largest_end_per_field_and_counts_empty_segments() {
    let seg =
        |field, pos, rows| Segment::new(field, (), 0, pos, rows, Dtype::Uint8, vec![]).unwrap();
    let cuts = cut(&[
        seg("a", 0, 5),
        seg("b", 9, 0),
        seg("a", 2, 1),
        seg("b", 4, 1),
    ]);
    assert_eq!(cuts.get("a"), Some(5));
    assert_eq!(cuts.get("b"), Some(9));
    assert_eq!(cuts.get("c"), None);
    assert_eq!(cuts.iter().collect::<Vec<_>>(), [("a", 5), ("b", 9)]);
    assert!(!cuts.is_empty());
    assert!(cut::<()>(&[]).is_empty());
}

#[test]
fn the_seed_example_in_the_algebra() {
    let prefill = [Segment::new(
        "routed_experts",
        "p.bin",
        0,
        0,
        3,
        Dtype::Uint16,
        vec![2, 4],
    )
    .unwrap()];
    let decode = [Segment::new(
        "routed_experts",
        "d.bin",
        0,
        2,
        3,
        Dtype::Uint16,
        vec![2, 4],
    )
    .unwrap()];
    let merged = merge_segments(&prefill, &decode).unwrap();
    assert_eq!(merged.len(), 2);
    assert_eq!(merged[0], prefill[0]);
    let tail = &merged[1];
    assert_eq!(
        (*tail.file(), tail.pos(), tail.rows(), tail.offset()),
        ("d.bin", 3, 2, 16)
    );
}
