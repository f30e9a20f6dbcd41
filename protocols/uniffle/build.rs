//! Generates the Uniffle gRPC types and service stubs from `proto/uniffle.proto`.
//!
//! protoc comes from `protoc-bin-vendored` so that builds (developer machines and CI alike)
//! never depend on a system protoc.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = PathBuf::from("proto");
    let proto = proto_dir.join("uniffle.proto");
    println!("cargo:rerun-if-changed={}", proto.display());

    let mut cfg = prost_build::Config::new();
    cfg.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // Every `bytes` field becomes `bytes::Bytes`: block payloads are sliced out of the
    // request buffer instead of being copied into a fresh Vec.
    cfg.bytes(["."]);
    // The schema, for the decode bound (`src/bounded.rs`): what a message
    // may decode into is read off the wire against it before prost runs.
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    cfg.file_descriptor_set_path(out.join("uniffle_descriptor.bin"));

    // The vendored include dir provides google/protobuf/{empty,wrappers}.proto.
    let wkt_include = protoc_bin_vendored::include_path()?;
    tonic_prost_build::configure()
        .codec_path("crate::bounded::BoundedCodec")
        .compile_with_config(cfg, &[proto], &[proto_dir, wkt_include])?;
    Ok(())
}
