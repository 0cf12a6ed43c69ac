//! Secondary-index entries of the seeds' record-like objects (phase 4's `2i_mix`, the NHS blend):
//! binary terms in three fields — a postcode, a date of birth and a last-modified time — that an
//! update replaces, as a Riak client clears an object's indexes and sets new ones before its PUT.
//!
//! An object's entries travel with it (levee: its metadata; peers: a header before the value, as
//! Riak keeps them in the object), so the update that replaces them knows which to remove:
//! [`encode`], [`decode`] and [`diff`].

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Result};
use rand::rngs::SmallRng;
use rand::Rng;

pub const POSTCODE: &str = "postcode_bin";
pub const DATE_OF_BIRTH: &str = "dateofbirth_bin";
pub const LAST_MODIFIED: &str = "lastmodified_bin";

/// Postcode areas (two capital letters) and districts per area: 76 × 26 districts.
const AREAS: u32 = 76;
const DISTRICTS: u32 = 26;
/// Years a date of birth falls in (1950..2030), as the seed's query years.
const FIRST_YEAR: u32 = 1950;
const YEARS: u32 = 80;

/// One index entry: a field and a binary term.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Entry {
    pub field: String,
    pub term: Vec<u8>,
}

impl Entry {
    pub fn new(field: &str, term: impl Into<Vec<u8>>) -> Entry {
        Entry {
            field: field.to_string(),
            term: term.into(),
        }
    }
}

/// A range query over one field's terms, bounds inclusive, optionally filtered by a regular
/// expression on the term (unanchored, as Riak's `term_regex`), returning terms.
#[derive(Debug, Clone)]
pub struct RangeQuery {
    pub field: &'static str,
    pub lo: Vec<u8>,
    pub hi: Vec<u8>,
    pub regex: Option<regex::bytes::Regex>,
    pub max_results: u32,
}

/// Six characters from four random bytes: what makes two people's terms differ.
fn tag(rng: &mut SmallRng) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bits: u32 = rng.gen();
    (0..6)
        .map(|i| ALPHABET[((bits >> (i * 6)) & 63) as usize] as char)
        .collect()
}

/// A postcode district: two capital letters for the area, then 1..=26.
fn district(rng: &mut SmallRng) -> String {
    let area = rng.gen_range(0..AREAS);
    let d = rng.gen_range(1..=DISTRICTS);
    format!(
        "{}{}{d}",
        (b'A' + (area / 26) as u8) as char,
        (b'A' + (area % 26) as u8) as char
    )
}

/// The entries of a freshly written record: entry 0 is its date of birth, entry 1 a postcode,
/// entry 2 the time of the write, and every further entry another postcode (people move).
pub fn record(rng: &mut SmallRng, entries: u32) -> Vec<Entry> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    (0..entries)
        .map(|i| match i {
            0 => Entry::new(
                DATE_OF_BIRTH,
                format!(
                    "{}{:02}{:02}|{}",
                    FIRST_YEAR + rng.gen_range(0..YEARS),
                    rng.gen_range(1..=12),
                    rng.gen_range(1..=28),
                    tag(rng)
                ),
            ),
            2 => Entry::new(LAST_MODIFIED, format!("{now:012}")),
            _ => Entry::new(POSTCODE, format!("{}|{}", district(rng), tag(rng))),
        })
        .collect()
}

/// The seed's postcode query: one district's terms whose tag starts with `a`..=`h`.
pub fn postcode_query(rng: &mut SmallRng, max_results: u32) -> RangeQuery {
    let d = district(rng);
    RangeQuery {
        field: POSTCODE,
        lo: format!("{d}|a").into_bytes(),
        hi: format!("{d}|h").into_bytes(),
        regex: None,
        max_results,
    }
}

/// The seed's date-of-birth query: the first ten days of a year, filtered by `regex` if given.
pub fn dob_query(
    rng: &mut SmallRng,
    regex: Option<&regex::bytes::Regex>,
    max_results: u32,
) -> RangeQuery {
    let year = FIRST_YEAR + rng.gen_range(0..YEARS);
    RangeQuery {
        field: DATE_OF_BIRTH,
        lo: format!("{year}0101").into_bytes(),
        hi: format!("{year}0110").into_bytes(),
        regex: regex.cloned(),
        max_results,
    }
}

/// Entries as stored with an object: per entry, the field's length (one byte), the field, the
/// term's length (two bytes, little-endian) and the term.
pub fn encode(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        entries
            .iter()
            .map(|e| 3 + e.field.len() + e.term.len())
            .sum(),
    );
    for e in entries {
        out.push(e.field.len() as u8);
        out.extend_from_slice(e.field.as_bytes());
        out.extend_from_slice(&(e.term.len() as u16).to_le_bytes());
        out.extend_from_slice(&e.term);
    }
    out
}

/// The entries [`encode`] wrote; an error for bytes it did not write.
pub fn decode(mut b: &[u8]) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    while let Some((&flen, rest)) = b.split_first() {
        let flen = flen as usize;
        ensure!(rest.len() >= flen + 2, "index entries cut short in a field");
        let field = std::str::from_utf8(&rest[..flen])
            .map_err(|_| anyhow::anyhow!("index field is not UTF-8"))?
            .to_string();
        let tlen = u16::from_le_bytes([rest[flen], rest[flen + 1]]) as usize;
        let rest = &rest[flen + 2..];
        ensure!(rest.len() >= tlen, "index entries cut short in a term");
        out.push(Entry {
            field,
            term: rest[..tlen].to_vec(),
        });
        b = &rest[tlen..];
    }
    Ok(out)
}

/// What an update that replaces `old` entries with `new` ones changes: (removed, added). An entry
/// in both is left alone; duplicates count once.
pub fn diff(old: &[Entry], new: &[Entry]) -> (Vec<Entry>, Vec<Entry>) {
    use std::collections::BTreeSet;
    let (o, n): (BTreeSet<&Entry>, BTreeSet<&Entry>) = (old.iter().collect(), new.iter().collect());
    (
        o.difference(&n).map(|e| (*e).clone()).collect(),
        n.difference(&o).map(|e| (*e).clone()).collect(),
    )
}

/// Check what [`encode`] can carry and peers' index keys can order: a field of 1..=255 bytes
/// without `/`, a term of at most 65,535 bytes without a NUL byte.
pub fn validate(entries: &[Entry]) -> Result<()> {
    for e in entries {
        if e.field.is_empty() || e.field.len() > 255 || e.field.contains('/') {
            bail!("index field `{}`: 1..=255 bytes, no `/`", e.field);
        }
        if e.term.len() > u16::MAX as usize || e.term.contains(&0) {
            bail!(
                "index term in {}: at most 65535 bytes, no NUL byte",
                e.field
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn entries_round_trip_and_bad_bytes_are_refused() {
        let mut rng = SmallRng::seed_from_u64(5);
        for n in 0..6 {
            let r = record(&mut rng, n);
            assert_eq!(r.len(), n as usize);
            validate(&r).unwrap();
            assert_eq!(decode(&encode(&r)).unwrap(), r);
        }
        let e = encode(&[Entry::new(POSTCODE, "AB1|xyz")]);
        for cut in 1..e.len() {
            assert!(decode(&e[..cut]).is_err(), "cut at {cut}");
        }
        assert!(decode(&[1, 0xff, 0, 0]).is_err(), "not UTF-8");
        assert!(validate(&[Entry::new("a/b", "x")]).is_err());
        assert!(validate(&[Entry::new("ab", b"x\0y".to_vec())]).is_err());
        assert!(validate(&[Entry::new("", "x")]).is_err());
    }

    #[test]
    fn a_record_has_a_birth_date_a_postcode_a_time_and_more_postcodes() {
        let mut rng = SmallRng::seed_from_u64(9);
        let r = record(&mut rng, 5);
        let fields: Vec<&str> = r.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [DATE_OF_BIRTH, POSTCODE, LAST_MODIFIED, POSTCODE, POSTCODE]
        );
        let dob = std::str::from_utf8(&r[0].term).unwrap();
        let re = regex::Regex::new(
            r"^(19[5-9][0-9]|20[0-2][0-9])(0[1-9]|1[0-2])(0[1-9]|1[0-9]|2[0-8])\|[A-Za-z0-9+/]{6}$",
        )
        .unwrap();
        assert!(re.is_match(dob), "{dob}");
        let pc = std::str::from_utf8(&r[1].term).unwrap();
        assert!(
            regex::Regex::new(r"^[A-C][A-Z]([1-9]|1[0-9]|2[0-6])\|[A-Za-z0-9+/]{6}$")
                .unwrap()
                .is_match(pc),
            "{pc}"
        );
    }

    #[test]
    fn queries_cover_what_records_hold() {
        // Over many records, a postcode query's range holds some of one district's terms and
        // a date-of-birth query's range some of one year's.
        let mut rng = SmallRng::seed_from_u64(1);
        let terms: Vec<Entry> = (0..200_000).flat_map(|_| record(&mut rng, 2)).collect();
        let hits = |q: &RangeQuery| {
            terms
                .iter()
                .filter(|e| e.field == q.field && e.term >= q.lo && e.term <= q.hi)
                .filter(|e| q.regex.as_ref().is_none_or(|r| r.is_match(&e.term)))
                .count()
        };
        let (mut pc, mut dob, mut dob_re) = (0, 0, 0);
        let re = regex::bytes::Regex::new("[0-9]{8}...[a-d]").unwrap();
        for _ in 0..50 {
            pc += hits(&postcode_query(&mut rng, 100));
            dob += hits(&dob_query(&mut rng, None, 100));
            dob_re += hits(&dob_query(&mut rng, Some(&re), 100));
        }
        // 200 k postcodes over 1,976 districts, 8 of 64 first tag characters: ≈ 12.6 a query.
        assert!((300..1000).contains(&pc), "{pc}");
        // 200 k births over 80 × 12 × 28 days, 10 days a query: ≈ 74 a query.
        assert!((2500..5000).contains(&dob), "{dob}");
        assert!(dob_re > 0 && dob_re < dob / 4, "{dob_re} of {dob}");
    }

    #[test]
    fn diff_removes_what_the_update_drops_and_adds_what_it_brings() {
        let e = |f: &str, t: &str| Entry::new(f, t);
        // (old, new, removed, added)
        type Case = (Vec<Entry>, Vec<Entry>, Vec<Entry>, Vec<Entry>);
        let cases: Vec<Case> = vec![
            (vec![], vec![e("a", "1")], vec![], vec![e("a", "1")]),
            (vec![e("a", "1")], vec![], vec![e("a", "1")], vec![]),
            (
                vec![e("a", "1"), e("b", "2")],
                vec![e("a", "1"), e("b", "3")],
                vec![e("b", "2")],
                vec![e("b", "3")],
            ),
            // Same term, other field: a different entry.
            (
                vec![e("a", "1")],
                vec![e("b", "1")],
                vec![e("a", "1")],
                vec![e("b", "1")],
            ),
            // Duplicates count once; unchanged entries are left alone.
            (
                vec![e("a", "1"), e("a", "1")],
                vec![e("a", "1"), e("c", "9"), e("c", "9")],
                vec![],
                vec![e("c", "9")],
            ),
        ];
        for (old, new, removed, added) in cases {
            assert_eq!(diff(&old, &new), (removed, added), "{old:?} -> {new:?}");
        }
    }
}
