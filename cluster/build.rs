//! Generates the cluster protocol's types and service from `proto/cluster.proto`
//! (protoc from `protoc-bin-vendored`, as in the Uniffle crate).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = PathBuf::from("proto");
    let proto = proto_dir.join("cluster.proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    let mut cfg = prost_build::Config::new();
    cfg.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure().compile_with_config(cfg, &[proto], &[proto_dir])?;
    Ok(())
}
