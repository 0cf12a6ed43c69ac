//! Generate the levee.v1 bindings. protoc comes from the vendored crate, so no system package is
//! needed; a file descriptor set is emitted for gRPC server reflection.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    std::env::set_var("PROTOC", protoc);
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_build::configure()
        .file_descriptor_set_path(out.join("levee_v1_descriptor.bin"))
        .compile_protos(&["proto/levee/v1/levee.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/levee/v1/levee.proto");
    Ok(())
}
