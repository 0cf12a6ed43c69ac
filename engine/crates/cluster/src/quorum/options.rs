//! Quorum options: per-bucket-type defaults, per-request overrides, and their validation.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::causality::ConflictPolicy;
use crate::ring::MAX_N_VAL;

/// A quorum option as configured: a count, or a name resolved against `n_val`.
///
/// In JSON / YAML: `"one"`, `"quorum"` (`n_val / 2 + 1`), `"all"`, or a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "QuorumRepr", into = "QuorumRepr")]
pub enum QuorumValue {
    One,
    Quorum,
    All,
    Count(u32),
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum QuorumRepr {
    Count(u32),
    Name(String),
}

impl TryFrom<QuorumRepr> for QuorumValue {
    type Error = String;

    fn try_from(r: QuorumRepr) -> Result<Self, String> {
        match r {
            QuorumRepr::Count(n) => Ok(QuorumValue::Count(n)),
            QuorumRepr::Name(s) => match s.as_str() {
                "one" => Ok(QuorumValue::One),
                "quorum" => Ok(QuorumValue::Quorum),
                "all" => Ok(QuorumValue::All),
                other => Err(format!(
                    "unknown quorum value {other:?}: expected \"one\", \"quorum\", \"all\" or a number"
                )),
            },
        }
    }
}

impl From<QuorumValue> for QuorumRepr {
    fn from(q: QuorumValue) -> QuorumRepr {
        match q {
            QuorumValue::One => QuorumRepr::Name("one".into()),
            QuorumValue::Quorum => QuorumRepr::Name("quorum".into()),
            QuorumValue::All => QuorumRepr::Name("all".into()),
            QuorumValue::Count(n) => QuorumRepr::Count(n),
        }
    }
}

impl QuorumValue {
    /// The count for a preflist of `n_val` replicas.
    pub fn resolve(self, n_val: u32) -> u32 {
        match self {
            QuorumValue::One => 1,
            QuorumValue::Quorum => n_val / 2 + 1,
            QuorumValue::All => n_val,
            QuorumValue::Count(n) => n,
        }
    }
}

/// The options a quorum can be asked of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuorumOption {
    R,
    Pr,
    W,
    Pw,
    Dw,
}

impl QuorumOption {
    /// Counts primaries only.
    pub fn is_primary(self) -> bool {
        matches!(self, QuorumOption::Pr | QuorumOption::Pw)
    }
}

impl fmt::Display for QuorumOption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuorumOption::R => "r",
            QuorumOption::Pr => "pr",
            QuorumOption::W => "w",
            QuorumOption::Pw => "pw",
            QuorumOption::Dw => "dw",
        })
    }
}

/// Options that cannot be honoured for this `n_val`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OptionsError {
    #[error("n_val {0} is out of range: it must be between 1 and {MAX_N_VAL}")]
    BadNVal(u32),
    #[error("{option}=0: at least one replica must answer")]
    Zero { option: QuorumOption },
    #[error("{option}={value} is more than n_val={n_val}: it could never be met")]
    AboveNVal {
        option: QuorumOption,
        value: u32,
        n_val: u32,
    },
}

fn check(
    option: QuorumOption,
    value: QuorumValue,
    n_val: u32,
    min: u32,
) -> Result<u32, OptionsError> {
    let v = value.resolve(n_val);
    if v < min {
        return Err(OptionsError::Zero { option });
    }
    if v > n_val {
        return Err(OptionsError::AboveNVal {
            option,
            value: v,
            n_val,
        });
    }
    Ok(v)
}

fn check_n_val(n_val: u32) -> Result<(), OptionsError> {
    if n_val == 0 || n_val > MAX_N_VAL {
        return Err(OptionsError::BadNVal(n_val));
    }
    Ok(())
}

/// The read options of one GET, resolved and checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadQuorum {
    n_val: u32,
    r: u32,
    pr: u32,
    notfound_ok: bool,
    basic_quorum: bool,
}

impl ReadQuorum {
    /// `1 ≤ r ≤ n_val`, `0 ≤ pr ≤ n_val` (`pr` above `r` is allowed: both must hold).
    pub fn new(
        n_val: u32,
        r: u32,
        pr: u32,
        notfound_ok: bool,
        basic_quorum: bool,
    ) -> Result<ReadQuorum, OptionsError> {
        check_n_val(n_val)?;
        let r = check(QuorumOption::R, QuorumValue::Count(r), n_val, 1)?;
        let pr = check(QuorumOption::Pr, QuorumValue::Count(pr), n_val, 0)?;
        Ok(ReadQuorum {
            n_val,
            r,
            pr,
            notfound_ok,
            basic_quorum,
        })
    }

    pub fn n_val(&self) -> u32 {
        self.n_val
    }
    pub fn r(&self) -> u32 {
        self.r
    }
    pub fn pr(&self) -> u32 {
        self.pr
    }
    pub fn notfound_ok(&self) -> bool {
        self.notfound_ok
    }
    pub fn basic_quorum(&self) -> bool {
        self.basic_quorum
    }

    /// How many notfounds (those that do not count toward `r`) and errors end the read: once
    /// `n_val - r + 1` of them arrived, `r` oks are out of reach; with `basic_quorum`, a majority
    /// (`n_val / 2 + 1`) is already enough to give up, whichever is smaller.
    pub fn fail_threshold(&self) -> u32 {
        let cannot = self.n_val - self.r + 1;
        if self.basic_quorum {
            cannot.min(self.n_val / 2 + 1)
        } else {
            cannot
        }
    }
}

/// The write options of one PUT (or DELETE), resolved and checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteQuorum {
    n_val: u32,
    w: u32,
    pw: u32,
    dw: u32,
}

impl WriteQuorum {
    /// `1 ≤ w ≤ n_val`, `0 ≤ pw, dw ≤ n_val` (`dw` above `w` is allowed: a durable replica
    /// has also written, so it raises the effective `w`).
    pub fn new(n_val: u32, w: u32, pw: u32, dw: u32) -> Result<WriteQuorum, OptionsError> {
        check_n_val(n_val)?;
        let w = check(QuorumOption::W, QuorumValue::Count(w), n_val, 1)?;
        let pw = check(QuorumOption::Pw, QuorumValue::Count(pw), n_val, 0)?;
        let dw = check(QuorumOption::Dw, QuorumValue::Count(dw), n_val, 0)?;
        Ok(WriteQuorum { n_val, w, pw, dw })
    }

    pub fn n_val(&self) -> u32 {
        self.n_val
    }
    pub fn w(&self) -> u32 {
        self.w
    }
    pub fn pw(&self) -> u32 {
        self.pw
    }
    pub fn dw(&self) -> u32 {
        self.dw
    }
}

/// Per-request read overrides (the proto's optional fields); `None` takes the bucket type's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    pub r: Option<QuorumValue>,
    pub pr: Option<QuorumValue>,
    pub notfound_ok: Option<bool>,
    pub basic_quorum: Option<bool>,
}

/// Per-request write overrides; `None` takes the bucket type's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteOptions {
    pub w: Option<QuorumValue>,
    pub pw: Option<QuorumValue>,
    pub dw: Option<QuorumValue>,
}

/// The defaults of a bucket type, as the node config embeds them. Every field is optional in the
/// config; the defaults are Riak's, except `dw` (below).
///
/// ```yaml
/// n_val: 3          # replicas of each key
/// r: quorum         # replies a GET waits for ("one" | "quorum" | "all" | a number)
/// w: quorum         # acknowledgements a PUT waits for
/// pr: 0             # of which from primaries (not fallbacks)
/// pw: 0
/// dw: 0             # of which durable (fsynced): Riak's default is quorum, but Riak's dw means
///                   # "the backend took it", which levee's w already means
/// notfound_ok: true # a notfound counts toward r
/// basic_quorum: false
/// conflict: siblings  # or lww
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BucketTypeProps {
    pub n_val: u32,
    pub r: QuorumValue,
    pub w: QuorumValue,
    pub pr: QuorumValue,
    pub pw: QuorumValue,
    pub dw: QuorumValue,
    pub notfound_ok: bool,
    pub basic_quorum: bool,
    pub conflict: ConflictPolicy,
}

impl Default for BucketTypeProps {
    fn default() -> Self {
        BucketTypeProps {
            n_val: 3,
            r: QuorumValue::Quorum,
            w: QuorumValue::Quorum,
            pr: QuorumValue::Count(0),
            pw: QuorumValue::Count(0),
            dw: QuorumValue::Count(0),
            notfound_ok: true,
            basic_quorum: false,
            conflict: ConflictPolicy::Siblings,
        }
    }
}

impl BucketTypeProps {
    /// Checks the defaults themselves (at config load, so a bad bucket type fails at start).
    pub fn validate(&self) -> Result<(), OptionsError> {
        self.read(&ReadOptions::default())?;
        self.write(&WriteOptions::default())?;
        Ok(())
    }

    /// The read quorum of a request: its overrides over these defaults.
    pub fn read(&self, o: &ReadOptions) -> Result<ReadQuorum, OptionsError> {
        check_n_val(self.n_val)?;
        let n = self.n_val;
        ReadQuorum::new(
            n,
            check(QuorumOption::R, o.r.unwrap_or(self.r), n, 1)?,
            check(QuorumOption::Pr, o.pr.unwrap_or(self.pr), n, 0)?,
            o.notfound_ok.unwrap_or(self.notfound_ok),
            o.basic_quorum.unwrap_or(self.basic_quorum),
        )
    }

    /// The write quorum of a request: its overrides over these defaults.
    pub fn write(&self, o: &WriteOptions) -> Result<WriteQuorum, OptionsError> {
        check_n_val(self.n_val)?;
        let n = self.n_val;
        WriteQuorum::new(
            n,
            check(QuorumOption::W, o.w.unwrap_or(self.w), n, 1)?,
            check(QuorumOption::Pw, o.pw.unwrap_or(self.pw), n, 0)?,
            check(QuorumOption::Dw, o.dw.unwrap_or(self.dw), n, 0)?,
        )
    }
}
