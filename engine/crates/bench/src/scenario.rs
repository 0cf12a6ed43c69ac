//! Scenario files (TOML) in basho_bench's vocabulary. See docs/benchmarks.md for every field.
//!
//! ```toml
//! driver = "levee"              # levee | rocksdb | rocksdb-blob | fjall | leveldb | grpc
//! mode = "max"                  # or "rate" with rate = <ops/s per worker>
//! concurrent = 8
//! duration = "2m"               # s / m / h suffixes
//! report_interval = "10s"
//! sync = false                  # durable writes (sync_on_write / WriteOptions::sync)
//! operations = [["get", 5], ["update", 1]]
//! [key_generator]
//! type = "pareto_int"           # uniform_int | sequential_int | partitioned_sequential_int | pareto_int | truncated_pareto_int
//! n = 100000
//! [value_generator]
//! type = "fixed_bin"            # fixed_bin (size) | exponential_bin (min, mean) | uniform_bin (min, max)
//! size = 8192                   #   | hot_scaled_bin (size, hot_keys, hot_factor)
//! compact_journal_every = "10s"  # optional: explicit maintenance (levee journal compaction)
//! rebuild_aae_every = "3m"       # optional: levee AAE tree rebuilds
//! rebuild_aae_journal_check = false  # optional: rebuilds check each object's journal record
//! compressible = 0.75            # optional: share of each value that is text (default 0: random)
//! compression = "lz4"            # optional: levee's compression_method, RocksDB's compression
//! compression_point = "on_receipt"  # optional, levee only: or "on_compact"
//! compaction_mb_per_sec = 200    # optional, levee only: journal compaction's pace (unpaced by default)
//! journal_segment_mb = 1024      # optional, levee only: journal segment roll size (default 256)
//! journal_spare_segments = 0     # optional, levee only: replaced segments kept to write over (default 2)
//! compaction_busy_percent = 25  # optional, levee only: percent of the time a compaction works (default 100)
//! aae_rebuild_busy_percent = 100 # optional, levee only: percent of the time a rebuild works (default 10)
//! compaction_nice = 0            # optional, levee only: nice value of the compaction thread (default 10)
//! unique_value_size = 6000       # put_unique's incompressible write-once documents
//! [preload]
//! keys = 10000                  # sequential puts of keys 0..keys before the timed run
//! [index]                       # records' index entries (records.rs)
//! entries = 4                   # per update_with_2i / put_unique: birth date, postcode, time, postcodes
//! max_results = 100             # per postcode_query / dob_query
//! dob_regex = "[0-9]{8}...[a-d]"  # optional: dob_query's term_regex
//! ```

use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default = "default_driver")]
    pub driver: String,
    #[serde(default = "default_mode")]
    pub mode: String,
    /// Operations per second per worker when `mode = "rate"`.
    #[serde(default)]
    pub rate: f64,
    pub concurrent: usize,
    #[serde(with = "dur")]
    pub duration: Duration,
    #[serde(with = "dur", default = "default_interval")]
    pub report_interval: Duration,
    #[serde(default)]
    pub sync: bool,
    pub operations: Vec<(String, u32)>,
    pub key_generator: KeyGenSpec,
    pub value_generator: ValueGenSpec,
    #[serde(default)]
    pub preload: Preload,
    /// Index entries of records (update_with_2i, put_unique) and the queries' limits.
    #[serde(default)]
    pub index: IndexSpec,
    /// Size of put_unique's write-once documents (incompressible, whatever `compressible` says).
    #[serde(default = "default_unique_value_size")]
    pub unique_value_size: usize,
    /// Ask the driver for explicit maintenance this often (levee: journal compaction), e.g.
    /// "10s". Off by default.
    #[serde(default)]
    pub compact_journal_every: Option<String>,
    /// Ask the driver to rebuild its AAE tree this often (levee), e.g. "3m". Off by default.
    #[serde(default)]
    pub rebuild_aae_every: Option<String>,
    /// Whether those rebuilds check each object's journal record (leveled's journal check).
    #[serde(default)]
    pub rebuild_aae_journal_check: bool,
    /// gRPC driver: node address.
    #[serde(default)]
    pub address: Option<String>,
    /// Share (0..=1) of each value that is English-like text rather than random bytes: 0 (the
    /// default) is incompressible; 0.75 compresses about 2.5× with lz4.
    #[serde(default)]
    pub compressible: f64,
    /// Value compression: "none" (default), "lz4" or "zstd" — levee's `compression_method`,
    /// RocksDB's compression type (blob compression too for rocksdb-blob). Other drivers refuse it.
    #[serde(default)]
    pub compression: Option<String>,
    /// levee only: "on_receipt" (default) or "on_compact".
    #[serde(default)]
    pub compression_point: Option<String>,
    /// levee only: journal compaction's read + write budget in MB/s (`compaction_bytes_per_sec`);
    /// unpaced when absent.
    #[serde(default)]
    pub compaction_mb_per_sec: Option<u64>,
    /// levee only: the size at which a journal segment rolls, in MiB (`journal_segment_bytes`);
    /// the store's default (256 MiB) when absent.
    #[serde(default)]
    pub journal_segment_mb: Option<u64>,
    /// levee only: replaced journal segment files kept for rolls to write over, 0–16
    /// (`journal_spare_segments`); the store's default (2) when absent.
    #[serde(default)]
    pub journal_spare_segments: Option<usize>,
    /// levee only: the percent of the time a journal compaction works, 1–100
    /// (`compaction_busy_percent`); the store's default (100: unpaced) when absent.
    #[serde(default)]
    pub compaction_busy_percent: Option<u32>,
    /// levee only: the percent of the time an AAE rebuild works, 1–100
    /// (`aae_rebuild_busy_percent`); the store's default (10) when absent.
    #[serde(default)]
    pub aae_rebuild_busy_percent: Option<u32>,
    /// levee only: the nice value, 0–19, of the thread a journal compaction works on
    /// (`compaction_nice`; 0: the maintenance thread's own priority); the store's default (10)
    /// when absent.
    #[serde(default)]
    pub compaction_nice: Option<i32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, tag = "type", rename_all = "snake_case")]
pub enum KeyGenSpec {
    UniformInt { n: u64 },
    SequentialInt { n: u64 },
    PartitionedSequentialInt { n: u64 },
    ParetoInt { n: u64 },
    TruncatedParetoInt { n: u64 },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, tag = "type", rename_all = "snake_case")]
pub enum ValueGenSpec {
    FixedBin {
        size: usize,
    },
    ExponentialBin {
        min: usize,
        mean: usize,
    },
    UniformBin {
        min: usize,
        max: usize,
    },
    /// `size` bytes, except the `hot_keys` lowest key numbers (the hottest under pareto): from
    /// `hot_factor` × `size` at key 0 down to `size` at key `hot_keys`.
    HotScaledBin {
        size: usize,
        hot_keys: u64,
        hot_factor: f64,
    },
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preload {
    #[serde(default)]
    pub keys: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IndexSpec {
    /// Index entries of a record written by update_with_2i or put_unique (records.rs: a birth
    /// date, a postcode, the write's time, then more postcodes).
    pub entries: u32,
    /// Results a postcode_query or dob_query stops at.
    pub max_results: u32,
    /// dob_query's term_regex (none by default).
    pub dob_regex: Option<String>,
}

impl Default for IndexSpec {
    fn default() -> Self {
        IndexSpec {
            entries: 4,
            max_results: 100,
            dob_regex: None,
        }
    }
}

fn default_driver() -> String {
    "levee".into()
}
fn default_mode() -> String {
    "max".into()
}
fn default_unique_value_size() -> usize {
    6000
}
fn default_interval() -> Duration {
    Duration::from_secs(10)
}

pub const OPS: &[&str] = &[
    "get",
    "head",
    "put",
    "update",
    "delete",
    "update_with_2i",
    "put_unique",
    "get_unique",
    "postcode_query",
    "dob_query",
];

/// Operations that do not draw from the key generator (they have keys of their own, or none).
pub const UNKEYED_OPS: &[&str] = &["put_unique", "get_unique", "postcode_query", "dob_query"];

/// Operations that write or read index entries: a scenario with any of them indexes objects.
pub const INDEX_OPS: &[&str] = &[
    "update_with_2i",
    "put_unique",
    "postcode_query",
    "dob_query",
];

mod dur {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Minutes(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            // basho_bench's duration is in minutes.
            Raw::Minutes(m) => Ok(Duration::from_secs_f64(m * 60.0)),
            Raw::Text(t) => super::parse_duration(&t).map_err(serde::de::Error::custom),
        }
    }
}

/// A duration as humantime reads it ("90s", "2m", "1h30m", "250ms"); a bare number is seconds.
pub fn parse_duration(t: &str) -> Result<Duration> {
    let t = t.trim();
    if let Ok(secs) = t.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(t)
        .with_context(|| format!("bad duration `{t}` (e.g. 90s, 5m, 1h30m, 250ms)"))
}

impl Scenario {
    pub fn from_toml(text: &str) -> Result<Scenario> {
        let s: Scenario = toml::from_str(text).context("parsing scenario")?;
        s.validate()?;
        Ok(s)
    }

    pub fn load(path: &std::path::Path) -> Result<Scenario> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::from_toml(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Whether objects carry index entries (some operation writes or queries them): peers then
    /// store each value with a header of its entries (emulated.rs).
    pub fn indexed(&self) -> bool {
        self.operations
            .iter()
            .any(|(op, w)| *w > 0 && INDEX_OPS.contains(&op.as_str()))
    }

    /// dob_query's term_regex, compiled.
    pub fn dob_regex(&self) -> Result<Option<regex::bytes::Regex>> {
        self.index
            .dob_regex
            .as_deref()
            .map(|r| regex::bytes::Regex::new(r).with_context(|| format!("index.dob_regex `{r}`")))
            .transpose()
    }

    /// The explicit maintenance asked for: (kind, interval) from `compact_journal_every` and
    /// `rebuild_aae_every`.
    pub fn maintenance(&self) -> Result<Vec<(crate::maintenance::Kind, Duration)>> {
        use crate::maintenance::Kind;
        let rebuild = if self.rebuild_aae_journal_check {
            Kind::AaeRebuildJournalCheck
        } else {
            Kind::AaeRebuild
        };
        let mut out = Vec::new();
        for (name, value, kind) in [
            (
                "compact_journal_every",
                &self.compact_journal_every,
                Kind::JournalCompaction,
            ),
            ("rebuild_aae_every", &self.rebuild_aae_every, rebuild),
        ] {
            if let Some(t) = value {
                let d = parse_duration(t).context(name)?;
                if d.is_zero() {
                    bail!("{name} must be positive");
                }
                out.push((kind, d));
            }
        }
        Ok(out)
    }

    pub fn validate(&self) -> Result<()> {
        if !crate::drivers::NAMES.contains(&self.driver.as_str()) {
            bail!(
                "driver must be one of {}, not `{}`",
                crate::drivers::NAMES.join(", "),
                self.driver
            );
        }
        match self.mode.as_str() {
            "max" => {}
            "rate" if self.rate > 0.0 => {}
            "rate" => bail!("mode = \"rate\" needs rate > 0 (operations per second per worker)"),
            m => bail!("mode must be \"max\" or \"rate\", not `{m}`"),
        }
        if self.concurrent == 0 {
            bail!("concurrent must be at least 1");
        }
        if self.duration.is_zero() || self.report_interval.is_zero() {
            bail!("duration and report_interval must be positive");
        }
        if self.operations.is_empty() || self.operations.iter().all(|(_, w)| *w == 0) {
            bail!("operations needs at least one op with a positive weight");
        }
        for (op, _) in &self.operations {
            if !OPS.contains(&op.as_str()) {
                bail!("unknown operation `{op}` (known: {})", OPS.join(", "));
            }
        }
        if !(1..=16).contains(&self.index.entries) {
            bail!("index.entries must be 1..=16, not {}", self.index.entries);
        }
        if self.index.max_results == 0 {
            bail!("index.max_results must be at least 1");
        }
        self.dob_regex()?;
        if self.unique_value_size == 0 || self.unique_value_size > 16 << 20 {
            bail!(
                "unique_value_size must be 1..=16 MiB, not {}",
                self.unique_value_size
            );
        }
        if let ValueGenSpec::HotScaledBin {
            hot_factor,
            hot_keys,
            ..
        } = self.value_generator
        {
            if !(1.0..=64.0).contains(&hot_factor) || hot_keys == 0 {
                bail!("hot_scaled_bin needs hot_keys ≥ 1 and hot_factor in 1..=64, not {hot_keys} and {hot_factor}");
            }
        }
        self.maintenance()?;
        if self.rebuild_aae_journal_check && self.rebuild_aae_every.is_none() {
            bail!("rebuild_aae_journal_check needs rebuild_aae_every");
        }
        if self.driver == "grpc" && self.address.is_none() {
            bail!("driver = \"grpc\" needs address = \"host:port\"");
        }
        if !(0.0..=1.0).contains(&self.compressible) {
            bail!(
                "compressible must be between 0 and 1, not {}",
                self.compressible
            );
        }
        let method = self.compression.as_deref().unwrap_or("none");
        if !["none", "lz4", "zstd"].contains(&method) {
            bail!("compression must be \"none\", \"lz4\" or \"zstd\", not `{method}`");
        }
        let compressing_drivers = ["levee", "rocksdb", "rocksdb-blob"];
        if method != "none" && !compressing_drivers.contains(&self.driver.as_str()) {
            bail!(
                "compression is set but driver {} does not take it (only {})",
                self.driver,
                compressing_drivers.join(", ")
            );
        }
        if let Some(point) = &self.compression_point {
            if self.driver != "levee" || !["on_receipt", "on_compact"].contains(&point.as_str()) {
                bail!("compression_point is levee's: \"on_receipt\" or \"on_compact\", not `{point}` with driver {}", self.driver);
            }
        }
        match self.compaction_mb_per_sec {
            Some(0) => {
                bail!("compaction_mb_per_sec must be at least 1 (leave it out for no pacing)")
            }
            Some(_) if self.driver != "levee" => bail!(
                "compaction_mb_per_sec is levee's journal compaction pace, not for driver {}",
                self.driver
            ),
            _ => {}
        }
        for (field, value, paces) in [
            (
                "compaction_busy_percent",
                self.compaction_busy_percent,
                "journal compaction",
            ),
            (
                "aae_rebuild_busy_percent",
                self.aae_rebuild_busy_percent,
                "AAE rebuilds",
            ),
        ] {
            match value {
                Some(p) if !(1..=100).contains(&p) => bail!("{field} must be 1 to 100, not {p}"),
                Some(_) if self.driver != "levee" => bail!(
                    "{field} paces levee's {paces}, not for driver {}",
                    self.driver
                ),
                _ => {}
            }
        }
        match self.compaction_nice {
            Some(n) if !(0..=19).contains(&n) => bail!("compaction_nice must be 0 to 19, not {n}"),
            Some(_) if self.driver != "levee" => bail!(
                "compaction_nice is the CPU priority of levee's journal compaction, not for driver {}",
                self.driver
            ),
            _ => {}
        }
        match self.journal_segment_mb {
            Some(0) | Some(4097..) => {
                bail!("journal_segment_mb must be 1 to 4096 (leave it out for the store's default)")
            }
            Some(_) if self.driver != "levee" => bail!(
                "journal_segment_mb is levee's journal segment size, not for driver {}",
                self.driver
            ),
            _ => {}
        }
        match self.journal_spare_segments {
            Some(17..) => bail!(
                "journal_spare_segments must be 0 to 16 (leave it out for the store's default)"
            ),
            Some(_) if self.driver != "levee" => bail!(
                "journal_spare_segments is levee's count of reused journal segments, not for driver {}",
                self.driver
            ),
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_seed_like_scenario_and_rejects_bad_ones() {
        let s = Scenario::from_toml(
            r#"
            concurrent = 4
            duration = 2
            operations = [["get", 5], ["update", 1]]
            [key_generator]
            type = "pareto_int"
            n = 1000
            [value_generator]
            type = "fixed_bin"
            size = 8192
            "#,
        )
        .unwrap();
        assert_eq!(s.duration, Duration::from_secs(120));
        assert_eq!(s.report_interval, Duration::from_secs(10));
        assert!(matches!(s.key_generator, KeyGenSpec::ParetoInt { n: 1000 }));
        let bad = |extra: &str| {
            Scenario::from_toml(&format!(
                "concurrent = 1\nduration = \"1s\"\noperations = [[\"get\", 1]]\n{extra}\n[key_generator]\ntype = \"uniform_int\"\nn = 5\n[value_generator]\ntype = \"fixed_bin\"\nsize = 1\n"
            ))
            .unwrap_err()
            .to_string()
        };
        assert!(format!("{:#}", anyhow::anyhow!(bad("mode = \"rate\""))).contains("rate"));
        assert!(bad("driver = \"mongo\"").contains("driver"));
        assert!(bad("compressible = 1.5").contains("between 0 and 1"));
        assert!(bad("compression = \"gzip\"").contains("\"lz4\" or \"zstd\""));
        assert!(bad("driver = \"fjall\"\ncompression = \"lz4\"").contains("does not take it"));
        assert!(
            bad("driver = \"rocksdb\"\ncompression_point = \"on_compact\"").contains("levee's")
        );
        assert!(bad("compression_point = \"later\"").contains("on_compact"));
        assert!(bad("compaction_mb_per_sec = 0").contains("at least 1"));
        assert!(bad("driver = \"fjall\"\ncompaction_mb_per_sec = 100").contains("levee's"));
        assert!(bad("journal_segment_mb = 0").contains("1 to 4096"));
        assert!(bad("journal_segment_mb = 5000").contains("1 to 4096"));
        assert!(bad("driver = \"rocksdb\"\njournal_segment_mb = 64").contains("levee's"));
        assert!(bad("journal_spare_segments = 17").contains("0 to 16"));
        assert!(bad("driver = \"fjall\"\njournal_spare_segments = 1").contains("levee's"));
        assert!(bad("compaction_busy_percent = 0").contains("1 to 100"));
        assert!(bad("driver = \"fjall\"\ncompaction_busy_percent = 50").contains("levee's"));
        assert!(bad("aae_rebuild_busy_percent = 0").contains("1 to 100"));
        assert!(bad("compaction_nice = 20").contains("0 to 19"));
        assert!(bad("compaction_nice = -1").contains("0 to 19"));
        assert!(bad("driver = \"rocksdb\"\ncompaction_nice = 0").contains("levee's"));
        assert!(bad("aae_rebuild_busy_percent = 101").contains("1 to 100"));
        assert!(bad("driver = \"rocksdb\"\naae_rebuild_busy_percent = 100").contains("levee's"));
        assert!(bad("[index]\nentries = 0").contains("1..=16"));
        assert!(bad("[index]\nmax_results = 0").contains("at least 1"));
        let e = bad("[index]\ndob_regex = \"[0-9\"");
        assert!(e.contains("dob_regex"), "{e}");
        assert!(bad("unique_value_size = 0").contains("unique_value_size"));
        let old = Scenario::from_toml(
            "concurrent = 1\nduration = \"1s\"\noperations = [[\"get\", 1]]\n[key_generator]\ntype = \"uniform_int\"\nn = 5\n[value_generator]\ntype = \"fixed_bin\"\nsize = 1\n[index]\nterms = 5\n",
        )
        .unwrap_err();
        assert!(
            format!("{old:#}").contains("unknown field `terms`"),
            "{old:#}"
        );
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("45").unwrap(), Duration::from_secs(45));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        let e = parse_duration("5 parsecs").unwrap_err();
        assert!(format!("{e:#}").contains("1h30m"), "{e:#}");
    }
}
