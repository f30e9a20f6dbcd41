//! The `ShuffleServer` gRPC service: decodes requests, calls the core, and
//! answers with a status in the body (as the Java server does: the client
//! reads the body status, and a gRPC-level error counts as a transport fault).

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::core::ShuffleServerCore;
use super::wire::{self, Transport};
use crate::error::UniffleError;
use crate::proto::shuffle_server_server::ShuffleServer;
use crate::proto::*;

pub struct ShuffleServerService {
    core: Arc<ShuffleServerCore>,
}

impl ShuffleServerService {
    pub fn new(core: Arc<ShuffleServerCore>) -> Self {
        ShuffleServerService { core }
    }
}

/// (status, retMsg) of a result.
fn outcome<T>(r: &Result<T, UniffleError>, op: &'static str) -> (i32, String) {
    match r {
        Ok(_) => (StatusCode::Success as i32, String::new()),
        Err(e) => (wire::failed(Transport::Grpc, op, e) as i32, e.to_string()),
    }
}

#[tonic::async_trait]
impl ShuffleServer for ShuffleServerService {
    async fn register_shuffle(
        &self,
        request: Request<ShuffleRegisterRequest>,
    ) -> Result<Response<ShuffleRegisterResponse>, Status> {
        let r = request.into_inner();
        let ranges = r
            .partition_ranges
            .iter()
            .map(|p| (p.start, p.end))
            .collect();
        tracing::debug!(app = %r.app_id, shuffle = r.shuffle_id, "registerShuffle");
        let result = self
            .core
            .register_shuffle(&r.app_id, r.shuffle_id, ranges, 0)
            .await;
        if result.is_ok() {
            self.core.set_user(&r.app_id, &r.user);
            self.core.set_client_properties(&r.app_id, &r.properties);
        }
        let (status, ret_msg) = outcome(&result, "registerShuffle");
        Ok(Response::new(ShuffleRegisterResponse { status, ret_msg }))
    }

    async fn unregister_shuffle(
        &self,
        request: Request<ShuffleUnregisterRequest>,
    ) -> Result<Response<ShuffleUnregisterResponse>, Status> {
        let r = request.into_inner();
        // Removal runs in the background; the client only logs failures.
        let core = self.core.clone();
        tokio::spawn(async move {
            if let Err(e) = core.unregister_shuffle(&r.app_id, r.shuffle_id).await {
                tracing::warn!(app = %r.app_id, shuffle = r.shuffle_id, error = %e, "unregisterShuffle failed");
            }
        });
        Ok(Response::new(ShuffleUnregisterResponse {
            status: StatusCode::Success as i32,
            ret_msg: "OK".into(),
        }))
    }

    async fn unregister_shuffle_by_app_id(
        &self,
        request: Request<ShuffleUnregisterByAppIdRequest>,
    ) -> Result<Response<ShuffleUnregisterByAppIdResponse>, Status> {
        let r = request.into_inner();
        let core = self.core.clone();
        tokio::spawn(async move {
            if let Err(e) = core.unregister_app(&r.app_id).await {
                tracing::warn!(app = %r.app_id, error = %e, "unregisterShuffleByAppId failed");
            }
        });
        Ok(Response::new(ShuffleUnregisterByAppIdResponse {
            status: StatusCode::Success as i32,
            ret_msg: "OK".into(),
        }))
    }

    async fn send_shuffle_data(
        &self,
        request: Request<SendShuffleDataRequest>,
    ) -> Result<Response<SendShuffleDataResponse>, Status> {
        let r = request.into_inner();
        let partitions = r
            .shuffle_data
            .into_iter()
            .map(wire::grpc_partition)
            .collect();
        let result = self
            .core
            .send_shuffle_data(&r.app_id, r.shuffle_id, r.require_buffer_id, partitions)
            .await;
        let (status, ret_msg) = outcome(&result, "sendShuffleData");
        Ok(Response::new(SendShuffleDataResponse { status, ret_msg }))
    }

    async fn get_local_shuffle_index(
        &self,
        request: Request<GetLocalShuffleIndexRequest>,
    ) -> Result<Response<GetLocalShuffleIndexResponse>, Status> {
        let r = request.into_inner();
        let result = self
            .core
            .local_index(&r.app_id, r.shuffle_id, r.partition_id)
            .await;
        let (status, ret_msg) = outcome(&result, "getLocalShuffleIndex");
        let index = result.unwrap_or_default();
        Ok(Response::new(GetLocalShuffleIndexResponse {
            index_data: index.index,
            status,
            ret_msg,
            data_file_len: index.data_len as i64,
            storage_ids: Vec::new(),
        }))
    }

    async fn get_local_shuffle_data(
        &self,
        request: Request<GetLocalShuffleDataRequest>,
    ) -> Result<Response<GetLocalShuffleDataResponse>, Status> {
        let r = request.into_inner();
        let result = self
            .core
            .local_data(&r.app_id, r.shuffle_id, r.partition_id, r.offset, r.length)
            .await;
        let (status, ret_msg) = outcome(&result, "getLocalShuffleData");
        Ok(Response::new(GetLocalShuffleDataResponse {
            data: result.unwrap_or_default(),
            status,
            ret_msg,
        }))
    }

    async fn get_memory_shuffle_data(
        &self,
        request: Request<GetMemoryShuffleDataRequest>,
    ) -> Result<Response<GetMemoryShuffleDataResponse>, Status> {
        let r = request.into_inner();
        let result =
            ShuffleServerCore::parse_filter(r.serialized_expected_task_ids_bitmap.as_deref())
                .and_then(|filter| {
                    self.core.memory_data(
                        &r.app_id,
                        r.shuffle_id,
                        r.partition_id,
                        r.last_block_id,
                        r.read_buffer_size as i64,
                        filter.as_ref(),
                    )
                });
        let (status, ret_msg) = outcome(&result, "getMemoryShuffleData");
        let data = result.unwrap_or_default();
        Ok(Response::new(GetMemoryShuffleDataResponse {
            shuffle_data_block_segments: data.segments.iter().map(Into::into).collect(),
            data: data.data,
            status,
            ret_msg,
            is_end: None,
        }))
    }

    async fn commit_shuffle_task(
        &self,
        request: Request<ShuffleCommitRequest>,
    ) -> Result<Response<ShuffleCommitResponse>, Status> {
        let r = request.into_inner();
        let result = self.core.commit(&r.app_id, r.shuffle_id);
        let (status, ret_msg) = outcome(&result, "commitShuffleTask");
        Ok(Response::new(ShuffleCommitResponse {
            commit_count: result.unwrap_or(0),
            status,
            ret_msg,
        }))
    }

    async fn report_shuffle_result(
        &self,
        request: Request<ReportShuffleResultRequest>,
    ) -> Result<Response<ReportShuffleResultResponse>, Status> {
        let r = request.into_inner();
        let partitions = r
            .partition_to_block_ids
            .into_iter()
            .map(|p| (p.partition_id, p.block_ids))
            .collect();
        let result = self
            .core
            .report_shuffle_result(&r.app_id, r.shuffle_id, partitions)
            .await;
        let (status, ret_msg) = outcome(&result, "reportShuffleResult");
        Ok(Response::new(ReportShuffleResultResponse {
            status,
            ret_msg,
        }))
    }

    async fn get_shuffle_result(
        &self,
        request: Request<GetShuffleResultRequest>,
    ) -> Result<Response<GetShuffleResultResponse>, Status> {
        let r = request.into_inner();
        let result = self
            .core
            .shuffle_result(&r.app_id, r.shuffle_id, &[r.partition_id]);
        let (status, ret_msg) = outcome(&result, "getShuffleResult");
        Ok(Response::new(GetShuffleResultResponse {
            status,
            ret_msg,
            serialized_bitmap: result.unwrap_or_default(),
        }))
    }

    async fn get_shuffle_result_for_multi_part(
        &self,
        request: Request<GetShuffleResultForMultiPartRequest>,
    ) -> Result<Response<GetShuffleResultForMultiPartResponse>, Status> {
        let r = request.into_inner();
        let result = self
            .core
            .shuffle_result(&r.app_id, r.shuffle_id, &r.partitions);
        let (status, ret_msg) = outcome(&result, "getShuffleResultForMultiPart");
        Ok(Response::new(GetShuffleResultForMultiPartResponse {
            status,
            ret_msg,
            serialized_bitmap: result.unwrap_or_default(),
            partition_stats: Vec::new(),
        }))
    }

    async fn finish_shuffle(
        &self,
        request: Request<FinishShuffleRequest>,
    ) -> Result<Response<FinishShuffleResponse>, Status> {
        let r = request.into_inner();
        let result = self.core.finish_shuffle(&r.app_id, r.shuffle_id).await;
        let (status, ret_msg) = outcome(&result, "finishShuffle");
        Ok(Response::new(FinishShuffleResponse { status, ret_msg }))
    }

    async fn require_buffer(
        &self,
        request: Request<RequireBufferRequest>,
    ) -> Result<Response<RequireBufferResponse>, Status> {
        let r = request.into_inner();
        let result = self
            .core
            .require_buffer(&r.app_id, r.shuffle_id, r.require_size as i64);
        let (status, ret_msg) = outcome(&result, "requireBuffer");
        let need_split_partition_ids = match &result {
            Ok(_) => self.core.partitions_to_split(
                &r.app_id,
                r.shuffle_id,
                &r.partition_ids,
                &r.partition_require_sizes,
            ),
            Err(_) => Vec::new(),
        };
        Ok(Response::new(RequireBufferResponse {
            require_buffer_id: result.unwrap_or(-1),
            status,
            ret_msg,
            need_split_partition_ids,
        }))
    }

    async fn app_heartbeat(
        &self,
        request: Request<AppHeartBeatRequest>,
    ) -> Result<Response<AppHeartBeatResponse>, Status> {
        let r = request.into_inner();
        let result = self.core.heartbeat(&r.app_id);
        let (status, ret_msg) = outcome(&result, "appHeartbeat");
        Ok(Response::new(AppHeartBeatResponse { status, ret_msg }))
    }

    async fn start_sort_merge(
        &self,
        _request: Request<StartSortMergeRequest>,
    ) -> Result<Response<StartSortMergeResponse>, Status> {
        Err(Status::unimplemented("remote merge is not supported"))
    }

    async fn get_sorted_shuffle_data(
        &self,
        _request: Request<GetSortedShuffleDataRequest>,
    ) -> Result<Response<GetSortedShuffleDataResponse>, Status> {
        Err(Status::unimplemented("remote merge is not supported"))
    }
}
