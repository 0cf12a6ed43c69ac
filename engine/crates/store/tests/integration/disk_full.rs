//! A full disk: writes past RLIMIT_FSIZE fail with EFBIG, exactly as a full filesystem fails a
//! write. The store must return an I/O error, keep serving reads, and reopen with every
//! acknowledged write. (One test per binary: the limit applies to the whole process.)

use levee_store::{Config, Error, Store};

fn set_fsize_limit(bytes: u64) {
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim), 0);
        lim.rlim_cur = bytes as libc::rlim_t;
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
    }
}

#[test]
fn disk_full_returns_an_error_and_keeps_every_acknowledged_write() {
    let d = tempfile::tempdir().unwrap();
    let cfg = Config {
        journal_segment_bytes: 8 << 20,
        journal_segment_records: 1_000_000,
        ..Config::small_for_tests()
    };
    let s = Store::open(d.path(), cfg.clone()).unwrap();
    set_fsize_limit(256 << 10);
    let mut acked = Vec::new();
    let mut failure = None;
    for i in 0..10_000u32 {
        match s.put(b"b", &i.to_le_bytes(), &[i as u8; 1000], b"", &[]) {
            Ok(_) => acked.push(i),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let e = failure.expect("writes must start failing once the file size limit is hit");
    assert!(
        matches!(e, Error::Io { .. }),
        "expected an I/O error, got {e:?}"
    );
    assert!(e.to_string().contains("journal"), "{e}");
    assert!(
        acked.len() > 100,
        "only {} writes before the limit",
        acked.len()
    );
    // Reads still work, and a retry still fails cleanly.
    assert_eq!(
        s.get(b"b", &acked[0].to_le_bytes()).unwrap().unwrap().value,
        vec![acked[0] as u8; 1000]
    );
    assert!(s.put(b"b", b"x", &[0u8; 1000], b"", &[]).is_err());
    s.close().unwrap();
    drop(s);
    set_fsize_limit(libc::RLIM_INFINITY);
    let s = Store::open(d.path(), cfg).unwrap();
    for i in &acked {
        assert_eq!(
            s.get(b"b", &i.to_le_bytes()).unwrap().unwrap().value,
            vec![*i as u8; 1000],
            "key {i}"
        );
    }
    // And the store takes writes again.
    s.put(b"b", b"after", b"v", b"", &[]).unwrap();
    assert_eq!(s.get(b"b", b"after").unwrap().unwrap().value, b"v");
}
