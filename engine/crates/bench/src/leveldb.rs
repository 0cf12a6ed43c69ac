//! LevelDB peer through Debian's `libleveldb` (C API of `leveldb/c.h`, linked with `-lleveldb`):
//! the engine Riak's eleveldb descends from, as in the seeds' comparisons.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::drivers::CACHE_BYTES;
use crate::emulated::Kv;

#[repr(C)]
struct Opaque {
    _private: [u8; 0],
}

#[link(name = "leveldb")]
extern "C" {
    fn leveldb_options_create() -> *mut Opaque;
    fn leveldb_options_destroy(o: *mut Opaque);
    fn leveldb_options_set_create_if_missing(o: *mut Opaque, v: u8);
    fn leveldb_options_set_compression(o: *mut Opaque, v: c_int);
    fn leveldb_options_set_cache(o: *mut Opaque, c: *mut Opaque);
    fn leveldb_options_set_filter_policy(o: *mut Opaque, f: *mut Opaque);
    fn leveldb_options_set_max_open_files(o: *mut Opaque, n: c_int);
    fn leveldb_cache_create_lru(capacity: usize) -> *mut Opaque;
    fn leveldb_cache_destroy(c: *mut Opaque);
    fn leveldb_filterpolicy_create_bloom(bits_per_key: c_int) -> *mut Opaque;
    fn leveldb_filterpolicy_destroy(f: *mut Opaque);
    fn leveldb_writeoptions_create() -> *mut Opaque;
    fn leveldb_writeoptions_destroy(o: *mut Opaque);
    fn leveldb_writeoptions_set_sync(o: *mut Opaque, v: u8);
    fn leveldb_readoptions_create() -> *mut Opaque;
    fn leveldb_readoptions_destroy(o: *mut Opaque);
    fn leveldb_open(o: *const Opaque, name: *const c_char, err: *mut *mut c_char) -> *mut Opaque;
    fn leveldb_close(db: *mut Opaque);
    fn leveldb_put(
        db: *mut Opaque,
        o: *const Opaque,
        k: *const c_char,
        kl: usize,
        v: *const c_char,
        vl: usize,
        err: *mut *mut c_char,
    );
    fn leveldb_delete(
        db: *mut Opaque,
        o: *const Opaque,
        k: *const c_char,
        kl: usize,
        err: *mut *mut c_char,
    );
    fn leveldb_write(db: *mut Opaque, o: *const Opaque, batch: *mut Opaque, err: *mut *mut c_char);
    fn leveldb_get(
        db: *mut Opaque,
        o: *const Opaque,
        k: *const c_char,
        kl: usize,
        vl: *mut usize,
        err: *mut *mut c_char,
    ) -> *mut c_char;
    fn leveldb_free(p: *mut c_void);
    fn leveldb_writebatch_create() -> *mut Opaque;
    fn leveldb_writebatch_destroy(b: *mut Opaque);
    fn leveldb_writebatch_put(
        b: *mut Opaque,
        k: *const c_char,
        kl: usize,
        v: *const c_char,
        vl: usize,
    );
    fn leveldb_writebatch_delete(b: *mut Opaque, k: *const c_char, kl: usize);
    fn leveldb_create_iterator(db: *mut Opaque, o: *const Opaque) -> *mut Opaque;
    fn leveldb_iter_destroy(it: *mut Opaque);
    fn leveldb_iter_valid(it: *const Opaque) -> u8;
    fn leveldb_iter_seek(it: *mut Opaque, k: *const c_char, kl: usize);
    fn leveldb_iter_next(it: *mut Opaque);
    fn leveldb_iter_key(it: *const Opaque, kl: *mut usize) -> *const c_char;
    fn leveldb_iter_get_error(it: *const Opaque, err: *mut *mut c_char);
}

/// Turn LevelDB's `errptr` convention into a `Result`.
fn check(err: *mut c_char, what: &str) -> Result<()> {
    if err.is_null() {
        return Ok(());
    }
    // SAFETY: LevelDB sets errptr to a malloc'ed NUL-terminated string, which we free once.
    let msg = unsafe { CStr::from_ptr(err) }
        .to_string_lossy()
        .into_owned();
    unsafe { leveldb_free(err.cast()) };
    bail!("leveldb {what}: {msg}")
}

/// LevelDB with compression off, a block cache of `CACHE_BYTES` and a 10-bit bloom filter.
pub struct LevelDb {
    db: *mut Opaque,
    options: *mut Opaque,
    cache: *mut Opaque,
    filter: *mut Opaque,
    write: *mut Opaque,
    read: *mut Opaque,
    dir: PathBuf,
}

// SAFETY: a leveldb_t is safe for concurrent use by several threads (LevelDB's documented
// contract); the option objects are only read after open.
unsafe impl Send for LevelDb {}
unsafe impl Sync for LevelDb {}

impl LevelDb {
    pub fn open(dir: &Path, sync: bool) -> Result<LevelDb> {
        let name = CString::new(dir.to_string_lossy().as_bytes())?;
        // SAFETY: plain constructor/setter calls on objects we own; `db` is checked below.
        unsafe {
            let options = leveldb_options_create();
            leveldb_options_set_create_if_missing(options, 1);
            leveldb_options_set_compression(options, 0);
            let cache = leveldb_cache_create_lru(CACHE_BYTES);
            leveldb_options_set_cache(options, cache);
            let filter = leveldb_filterpolicy_create_bloom(10);
            leveldb_options_set_filter_policy(options, filter);
            leveldb_options_set_max_open_files(options, 1000);
            let write = leveldb_writeoptions_create();
            leveldb_writeoptions_set_sync(write, sync as u8);
            let read = leveldb_readoptions_create();
            let mut err = std::ptr::null_mut();
            let db = leveldb_open(options, name.as_ptr(), &mut err);
            let l = LevelDb {
                db,
                options,
                cache,
                filter,
                write,
                read,
                dir: dir.to_path_buf(),
            };
            check(err, "open")?;
            Ok(l)
        }
    }
}

impl Drop for LevelDb {
    fn drop(&mut self) {
        // SAFETY: each object was created in `open` and is destroyed once, the database first.
        unsafe {
            if !self.db.is_null() {
                leveldb_close(self.db);
            }
            leveldb_writeoptions_destroy(self.write);
            leveldb_readoptions_destroy(self.read);
            leveldb_options_destroy(self.options);
            leveldb_filterpolicy_destroy(self.filter);
            leveldb_cache_destroy(self.cache);
        }
    }
}

impl LevelDb {
    /// The value of `key`, handed to `f` while LevelDB's copy is alive.
    fn with_value<T>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> T) -> Result<Option<T>> {
        let mut len = 0usize;
        let mut err = std::ptr::null_mut();
        // SAFETY: key is a valid slice; a non-null result is malloc'ed by LevelDB, `len` bytes
        // long, and freed here after `f` has seen it.
        let v = unsafe {
            leveldb_get(
                self.db,
                self.read,
                key.as_ptr().cast(),
                key.len(),
                &mut len,
                &mut err,
            )
        };
        check(err, "get")?;
        if v.is_null() {
            return Ok(None);
        }
        let out = f(unsafe { std::slice::from_raw_parts(v.cast::<u8>(), len) });
        unsafe { leveldb_free(v.cast()) };
        Ok(Some(out))
    }
}

impl Kv for LevelDb {
    fn exists(&self, key: &[u8]) -> Result<bool> {
        Ok(self.with_value(key, |_| ())?.is_some())
    }
    fn read(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.with_value(key, <[u8]>::to_vec)
    }
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut err = std::ptr::null_mut();
        // SAFETY: valid slices for the duration of the call.
        unsafe {
            leveldb_put(
                self.db,
                self.write,
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
                &mut err,
            )
        };
        check(err, "put")
    }
    fn write(&self, puts: &[(Vec<u8>, Vec<u8>)], deletes: &[Vec<u8>]) -> Result<()> {
        let mut err = std::ptr::null_mut();
        // SAFETY: the batch copies what is put into it and is destroyed after the write.
        unsafe {
            let batch = leveldb_writebatch_create();
            for (k, v) in puts {
                leveldb_writebatch_put(
                    batch,
                    k.as_ptr().cast(),
                    k.len(),
                    v.as_ptr().cast(),
                    v.len(),
                );
            }
            for k in deletes {
                leveldb_writebatch_delete(batch, k.as_ptr().cast(), k.len());
            }
            leveldb_write(self.db, self.write, batch, &mut err);
            leveldb_writebatch_destroy(batch);
        }
        check(err, "write")
    }
    fn delete(&self, key: &[u8]) -> Result<()> {
        let mut err = std::ptr::null_mut();
        // SAFETY: valid slice for the duration of the call.
        unsafe {
            leveldb_delete(
                self.db,
                self.write,
                key.as_ptr().cast(),
                key.len(),
                &mut err,
            )
        };
        check(err, "delete")
    }
    fn scan(&self, from: &[u8], to: &[u8], f: &mut dyn FnMut(&[u8]) -> bool) -> Result<()> {
        // SAFETY: the iterator is used only inside this block and destroyed at its end; each key
        // it returns is seen by `f` before the next move.
        unsafe {
            let it = leveldb_create_iterator(self.db, self.read);
            leveldb_iter_seek(it, from.as_ptr().cast(), from.len());
            while leveldb_iter_valid(it) != 0 {
                let mut kl = 0usize;
                let k = std::slice::from_raw_parts(leveldb_iter_key(it, &mut kl).cast::<u8>(), kl);
                if k >= to || !f(k) {
                    break;
                }
                leveldb_iter_next(it);
            }
            let mut err = std::ptr::null_mut();
            leveldb_iter_get_error(it, &mut err);
            leveldb_iter_destroy(it);
            check(err, "iterate")
        }
    }
    fn close(&self) -> Result<()> {
        Ok(())
    }
    fn data_dir(&self) -> PathBuf {
        self.dir.clone()
    }
}
