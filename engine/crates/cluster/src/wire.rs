//! The small binary toolkit of levee-cluster's formats: unsigned LEB128 varints (shortest form
//! only: `put_varint`, `get_varint`, used by the causality codec and replica objects too),
//! little-endian integers, length-prefixed byte strings with a maximum, and a CRC-32C trailer over
//! everything before it (the continuation token and the handoff state).

/// Why bytes are not a valid token or handoff state. Offsets count from the first byte.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    #[error("truncated: {what} at byte {at}")]
    Truncated { at: usize, what: &'static str },
    #[error("not a {expected}: tag byte {found:#04x}")]
    WrongTag { expected: &'static str, found: u8 },
    #[error("unsupported format version {0}")]
    UnsupportedVersion(u8),
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum { stored: u32, computed: u32 },
    #[error("varint at byte {at} overflows 64 bits")]
    VarintOverflow { at: usize },
    #[error("varint at byte {at} is not in shortest form")]
    VarintNotShortest { at: usize },
    #[error("{what} is {len} bytes; the limit is {max}")]
    TooLong {
        what: &'static str,
        len: u64,
        max: usize,
    },
    #[error("bad {what} at byte {at}")]
    BadValue { at: usize, what: &'static str },
    #[error("{count} bytes after the end, at byte {at}")]
    TrailingBytes { at: usize, count: usize },
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Why bytes at a position are not a varint; `at` is the varint's first byte, except for
/// `Truncated`, where it is the byte that is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VarintError {
    Truncated { at: usize },
    Overflow { at: usize },
    NotShortest { at: usize },
}

/// The varint at `bytes[pos..]` (shortest form, at most 64 bits) and the position after it.
pub(crate) fn get_varint(bytes: &[u8], pos: usize) -> Result<(u64, usize), VarintError> {
    let mut v: u64 = 0;
    for i in 0..10usize {
        let at = pos + i;
        let b = *bytes.get(at).ok_or(VarintError::Truncated { at })?;
        let bits = u64::from(b & 0x7f);
        if i == 9 && bits > 1 {
            return Err(VarintError::Overflow { at: pos });
        }
        v |= bits << (7 * i);
        if b & 0x80 == 0 {
            if b == 0 && i > 0 {
                return Err(VarintError::NotShortest { at: pos });
            }
            return Ok((v, at + 1));
        }
    }
    Err(VarintError::Overflow { at: pos })
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Appends the CRC-32C of everything in `out` so far.
pub(crate) fn seal(out: &mut Vec<u8>) {
    let crc = levee_checksum::crc32c(out);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Checks the header (tag, version) and the CRC-32C trailer; returns a reader over the body
/// (after the header, before the trailer).
pub(crate) fn open<'a>(
    bytes: &'a [u8],
    tag: u8,
    version: u8,
    expected: &'static str,
) -> Result<Reader<'a>, FormatError> {
    let mut r = Reader { bytes, pos: 0 };
    let found = r.u8("tag byte")?;
    if found != tag {
        return Err(FormatError::WrongTag { expected, found });
    }
    let v = r.u8("version byte")?;
    if v != version {
        return Err(FormatError::UnsupportedVersion(v));
    }
    if bytes.len() < 6 {
        return Err(FormatError::Truncated {
            at: bytes.len(),
            what: "checksum",
        });
    }
    let body = bytes.len() - 4;
    let stored = u32::from_le_bytes(bytes[body..].try_into().expect("4 bytes"));
    let computed = levee_checksum::crc32c(&bytes[..body]);
    if stored != computed {
        return Err(FormatError::Checksum { stored, computed });
    }
    Ok(Reader {
        bytes: &bytes[..body],
        pos: 2,
    })
}

pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader of `bytes` from their first byte (no header or trailer checked).
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Moves past `n` bytes (at most to the end).
    pub(crate) fn skip(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.bytes.len());
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, FormatError> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or(FormatError::Truncated { at: self.pos, what })?;
        self.pos += 1;
        Ok(b)
    }

    pub(crate) fn array<const N: usize>(
        &mut self,
        what: &'static str,
    ) -> Result<[u8; N], FormatError> {
        let end = self.pos.checked_add(N).filter(|e| *e <= self.bytes.len());
        let end = end.ok_or(FormatError::Truncated { at: self.pos, what })?;
        let mut a = [0u8; N];
        a.copy_from_slice(&self.bytes[self.pos..end]);
        self.pos = end;
        Ok(a)
    }

    pub(crate) fn u32le(&mut self, what: &'static str) -> Result<u32, FormatError> {
        self.array::<4>(what).map(u32::from_le_bytes)
    }

    pub(crate) fn u64le(&mut self, what: &'static str) -> Result<u64, FormatError> {
        self.array::<8>(what).map(u64::from_le_bytes)
    }

    pub(crate) fn varint(&mut self, what: &'static str) -> Result<u64, FormatError> {
        let (v, next) = get_varint(self.bytes, self.pos).map_err(|e| match e {
            VarintError::Truncated { at } => FormatError::Truncated { at, what },
            VarintError::Overflow { at } => FormatError::VarintOverflow { at },
            VarintError::NotShortest { at } => FormatError::VarintNotShortest { at },
        })?;
        self.pos = next;
        Ok(v)
    }

    /// A length-prefixed byte string of at most `max` bytes; the length is checked against the
    /// limit and the bytes left before anything is allocated.
    pub(crate) fn bytes(&mut self, what: &'static str, max: usize) -> Result<Vec<u8>, FormatError> {
        let len = self.varint(what)?;
        if len > max as u64 {
            return Err(FormatError::TooLong { what, len, max });
        }
        let at = self.pos;
        let end = at
            .checked_add(len as usize)
            .filter(|e| *e <= self.bytes.len())
            .ok_or(FormatError::Truncated { at, what })?;
        let v = self.bytes[at..end].to_vec();
        self.pos = end;
        Ok(v)
    }

    pub(crate) fn end(&self) -> Result<(), FormatError> {
        if self.pos != self.bytes.len() {
            return Err(FormatError::TrailingBytes {
                at: self.pos,
                count: self.bytes.len() - self.pos,
            });
        }
        Ok(())
    }
}
