//! levee-bench: a volume-test tool in basho_bench's style. Scenario files drive a load against a
//! driver (levee embedded, RocksDB, RocksDB BlobDB, fjall, LevelDB, or a levee node over gRPC); results are written
//! in basho_bench's CSV formats and drawn as charts.

pub mod accumulated;
pub mod anchor;
pub mod charts;
pub mod drivers;
pub mod emulated;
pub mod generators;
pub mod leveldb;
pub mod maintenance;
pub mod records;
pub mod runner;
pub mod scenario;
