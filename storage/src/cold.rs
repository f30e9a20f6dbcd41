//! The cold tier: an OpenDAL operator (fs now; S3 and HDFS are configuration).
//!
//! Object stores cannot append, so each flush to the cold tier writes one new
//! immutable data object and its index object. Reads go through the gateway:
//! clients never need credentials for the cold store.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use opendal::layers::{RetryLayer, TimeoutLayer};
use opendal::{Buffer, Operator};
use serde::Serialize;
use tokio::sync::Semaphore;

use crate::block::Block;
use crate::config::{ColdBackend, ColdConfig};
use crate::error::{Result, StorageError};

#[derive(Clone, Debug, Serialize)]
pub struct ColdStatus {
    pub service: String,
    pub stored_bytes: u64,
    pub written_bytes: u64,
    pub read_bytes: u64,
    pub write_errors: u64,
}

pub(crate) struct ColdTier {
    op: Operator,
    prefix: String,
    service: &'static str,
    write_slots: Semaphore,
    pub(crate) stored_bytes: AtomicU64,
    written_bytes: AtomicU64,
    read_bytes: AtomicU64,
    write_errors: AtomicU64,
    pub(crate) huge_partition_threshold: u64,
}

impl ColdTier {
    pub(crate) fn open(config: &ColdConfig) -> Result<Arc<Self>> {
        let (op, service) = match &config.backend {
            ColdBackend::Fs { root } => {
                std::fs::create_dir_all(root).map_err(|e| StorageError::io(root, e))?;
                let root = root.canonicalize().map_err(|e| StorageError::io(root, e))?;
                let builder = opendal::services::Fs::default().root(&root.to_string_lossy());
                (Operator::new(builder)?, "fs")
            }
        };
        let op = op
            .layer(TimeoutLayer::new().with_io_timeout(Duration::from_secs(60)))
            .layer(RetryLayer::new().with_jitter().with_max_times(4));
        Ok(Arc::new(ColdTier {
            op,
            prefix: config.prefix.trim_matches('/').to_string(),
            service,
            write_slots: Semaphore::new(config.write_concurrency.max(1)),
            stored_bytes: AtomicU64::new(0),
            written_bytes: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            huge_partition_threshold: config.huge_partition_threshold.as_u64(),
        }))
    }

    /// Object path for `rel` (a `/`-separated path below the prefix).
    pub(crate) fn path(&self, rel: &str) -> String {
        if self.prefix.is_empty() {
            rel.to_string()
        } else {
            format!("{}/{}", self.prefix, rel)
        }
    }

    pub(crate) async fn write_segment(
        &self,
        data_path: &str,
        index_path: &str,
        blocks: Arc<[Block]>,
        index: Bytes,
    ) -> Result<()> {
        let _slot = self
            .write_slots
            .acquire()
            .await
            .map_err(|_| StorageError::ShuttingDown)?;
        let bytes: u64 = blocks.iter().map(Block::len).sum();
        // A non-contiguous buffer over the blocks: no copy into one allocation.
        let data: Vec<Bytes> = blocks.iter().map(|b| b.data.clone()).collect();
        let result = async {
            self.op.write(data_path, Buffer::from(data)).await?;
            // The index goes last: a readable index implies readable data.
            self.op.write(index_path, index).await?;
            Ok::<_, opendal::Error>(())
        }
        .await;
        match result {
            Ok(()) => {
                self.written_bytes.fetch_add(bytes, Ordering::Relaxed);
                metrics::counter!("switchyard_cold_uploads_total").increment(1);
                Ok(())
            }
            Err(e) => {
                self.write_errors.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("switchyard_cold_failures_total", "op" => "write").increment(1);
                // Leave no half-written object behind.
                let _ = self.op.delete(data_path).await;
                let _ = self.op.delete(index_path).await;
                Err(e.into())
            }
        }
    }

    pub(crate) async fn read(&self, path: &str, offset: u64, len: u64) -> Result<Bytes> {
        let buf = self
            .op
            .read_with(path)
            .range(offset..offset + len)
            .await
            .inspect_err(|_| {
                metrics::counter!("switchyard_cold_failures_total", "op" => "read").increment(1)
            })?;
        self.read_bytes.fetch_add(len, Ordering::Relaxed);
        metrics::counter!("switchyard_cold_read_bytes_total").increment(len);
        Ok(buf.to_bytes())
    }

    pub(crate) async fn delete(&self, path: &str) -> Result<()> {
        Ok(self.op.delete(path).await?)
    }

    /// Deletes everything below `rel` (a directory-like prefix).
    pub(crate) async fn delete_prefix(&self, rel: &str) -> Result<()> {
        let path = format!("{}/", self.path(rel).trim_end_matches('/'));
        Ok(self.op.delete_with(&path).recursive(true).await?)
    }

    /// Lists object paths below `rel` (for tests and cleanup checks).
    pub(crate) async fn list(&self, rel: &str) -> Result<Vec<String>> {
        let path = format!("{}/", self.path(rel).trim_end_matches('/'));
        let entries = self.op.list_with(&path).recursive(true).await?;
        Ok(entries
            .into_iter()
            .filter(|e| e.metadata().is_file())
            .map(|e| e.path().to_string())
            .collect())
    }

    pub(crate) fn status(&self) -> ColdStatus {
        ColdStatus {
            service: self.service.to_string(),
            stored_bytes: self.stored_bytes.load(Ordering::Relaxed),
            written_bytes: self.written_bytes.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            write_errors: self.write_errors.load(Ordering::Relaxed),
        }
    }
}
