//! Little-endian encoding helpers with bounds-checked decoding: a short or malformed buffer is a
//! corruption error, never a panic.

use crate::error::{Error, Result};

pub(crate) fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}
pub(crate) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}
/// A u32 length followed by the bytes.
pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u32(out, b.len() as u32);
    out.extend_from_slice(b);
}

/// Cursor over a byte slice; every read checks bounds.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() - self.pos < n {
            return Err(Error::Corruption(format!(
                "{} truncated: wanted {} bytes at offset {}, have {}",
                self.what,
                n,
                self.pos,
                self.buf.len() - self.pos
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub(crate) fn raw(&mut self, n: usize) -> Result<&'a [u8]> {
        self.take(n)
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.pos == self.buf.len()
    }
    pub(crate) fn expect_end(&self) -> Result<()> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(Error::Corruption(format!(
                "{}: {} unexpected trailing bytes",
                self.what,
                self.buf.len() - self.pos
            )))
        }
    }
}

/// Append a CRC32C of everything in `out` from `start`.
pub(crate) fn seal(out: &mut Vec<u8>, start: usize) {
    let crc = levee_checksum::crc32c(&out[start..]);
    put_u32(out, crc);
}

/// Split `buf` into payload and check its trailing CRC32C.
pub(crate) fn unseal<'a>(buf: &'a [u8], what: &str) -> Result<&'a [u8]> {
    if buf.len() < 4 {
        return Err(Error::Corruption(format!(
            "{what}: too short for a checksum"
        )));
    }
    let (payload, crc) = buf.split_at(buf.len() - 4);
    let want = u32::from_le_bytes(crc.try_into().unwrap());
    let got = levee_checksum::crc32c(payload);
    if want != got {
        return Err(Error::Corruption(format!(
            "{what}: checksum mismatch (stored {want:08x}, computed {got:08x})"
        )));
    }
    Ok(payload)
}
