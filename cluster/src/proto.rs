//! Generated from `proto/cluster.proto`.
#![allow(clippy::all, missing_docs)]

tonic::include_proto!("switchyard.cluster.v1");
