//! `GET /api/v1/apps`: the live applications and the last finished ones,
//! newest first, with how each ended: what the status page's "Finished
//! applications" table draws. The migration report has the same rows in
//! full; this one is bounded (`?finished=N`) so a page polling every few
//! seconds does not copy the whole history each time.

use axum::extract::{Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::migration::{row, AppRow};
use super::AdminState;

/// Finished applications answered when the query names no number.
const DEFAULT_FINISHED: usize = 50;
/// The most answered however many are asked for.
const MAX_FINISHED: usize = 1000;

#[derive(Deserialize)]
pub(super) struct AppsQuery {
    /// How many finished applications (newest first); default 50, at most 1000.
    finished: Option<usize>,
}

/// One finished application: its figures, and how long it lived.
#[derive(Serialize)]
struct Finished {
    #[serde(flatten)]
    row: AppRow,
    /// From its registration here to its removal.
    duration_ms: u64,
    /// `unregistered`, `lost` or `expired`.
    ended: &'static str,
}

#[derive(Serialize)]
pub(super) struct AppsBody {
    /// How long finished applications are kept (`storage.apps.history_retention`).
    retention_seconds: u64,
    /// The most kept (`storage.apps.history_max_apps`).
    max_kept: usize,
    /// Finished applications kept now (within retention), of which
    /// `finished` has the newest.
    finished_kept: usize,
    live: Vec<AppRow>,
    finished: Vec<Finished>,
}

pub(super) async fn apps(
    State(state): State<AdminState>,
    Query(q): Query<AppsQuery>,
) -> Json<AppsBody> {
    let limit = q.finished.unwrap_or(DEFAULT_FINISHED).min(MAX_FINISHED);
    let (mut live, mut finished) = (Vec::new(), Vec::new());
    for record in state.store.app_history() {
        match &record.removed {
            None => live.push(row(record)),
            Some(_) => finished.push(record),
        }
    }
    let finished_kept = finished.len();
    // The history is oldest removal first.
    let finished = finished
        .into_iter()
        .rev()
        .take(limit)
        .map(|r| {
            let removal = r.removed.clone().expect("finished");
            Finished {
                duration_ms: removal.unix_ms.saturating_sub(r.registered_unix_ms),
                ended: removal.reason,
                row: row(r),
            }
        })
        .collect();
    let config = &state.store.config().apps;
    Json(AppsBody {
        retention_seconds: config.history_retention.as_secs(),
        max_kept: config.history_max_apps,
        finished_kept,
        live,
        finished,
    })
}
