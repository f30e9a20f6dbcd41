//! Generates the Celeborn protobuf messages from `proto/celeborn.proto`.
//!
//! Celeborn carries its protobuf messages inside its own framing (no gRPC), so only
//! prost-build is needed. protoc comes from `protoc-bin-vendored`: no system protoc.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = PathBuf::from("proto");
    let proto = proto_dir.join("celeborn.proto");
    println!("cargo:rerun-if-changed={}", proto.display());

    let mut cfg = prost_build::Config::new();
    cfg.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // `bytes` fields become `bytes::Bytes`, sliced from the request buffer without a copy.
    cfg.bytes(["."]);
    cfg.compile_protos(&[proto], &[proto_dir])?;
    Ok(())
}
