//! `POST /api/v1/faults/disk`: switches a data directory's injected fault,
//! for soak and chaos tests of a running fleet (`switchyard-bench soak`).
//! Answers 404 unless `admin.fault_injection` is on, and needs the token.
//!
//! ```text
//! curl -X POST -H 'Authorization: Bearer TOKEN' -H 'Content-Type: application/json' \
//!      -d '{"dir": "/data/1", "mode": "hang"}' http://127.0.0.1:19990/api/v1/faults/disk
//! ```
//! `mode` is `error` (writes and probes fail), `hang` (every call of that
//! disk blocks until switched again) or `off`.

use std::path::PathBuf;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::{Deserialize, Serialize};
use switchyard_storage::fault::DiskFaultMode;

use super::{authorised, AdminState};

#[derive(Debug, Deserialize)]
pub(super) struct DiskFaultRequest {
    /// A data directory exactly as `storage.disks.dirs` names it.
    dir: PathBuf,
    mode: DiskFaultMode,
}

#[derive(Debug, Serialize)]
struct DiskFault {
    dir: PathBuf,
    mode: DiskFaultMode,
}

pub(super) async fn set_disk_fault(
    State(state): State<AdminState>,
    headers: axum::http::HeaderMap,
    Json(request): Json<DiskFaultRequest>,
) -> axum::response::Response {
    let Some(faults) = &state.disk_faults else {
        return (
            StatusCode::NOT_FOUND,
            "disk fault injection is off on this node (admin.fault_injection, for tests only)\n",
        )
            .into_response();
    };
    if let Err(refusal) = authorised(&state, &headers) {
        return refusal.into_response();
    }
    if !state.store.config().disks.dirs.contains(&request.dir) {
        let message = format!(
            "{} is not a data directory of this node (storage.disks.dirs)\n",
            request.dir.display()
        );
        return (StatusCode::BAD_REQUEST, message).into_response();
    }
    faults.set(&request.dir, request.mode);
    tracing::warn!(dir = %request.dir.display(), mode = ?request.mode, "disk fault switched over admin HTTP");
    let now: Vec<DiskFault> = faults
        .modes()
        .into_iter()
        .map(|(dir, mode)| DiskFault { dir, mode })
        .collect();
    (StatusCode::OK, Json(now)).into_response()
}
