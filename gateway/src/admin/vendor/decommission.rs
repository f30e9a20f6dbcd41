//! The vendors' decommission calls, mapped onto Switchyard's own: this
//! node's [`crate::decommission::Decommission`] at once, another node's
//! through its admin port (`POST`/`DELETE /api/v1/decommission`, as `ctl
//! decommission` does), with this node's `admin.token`, which a fleet
//! shares.

use super::members::Member;
use super::VendorState;

/// Why a node's decommission could not be changed.
#[derive(Debug, thiserror::Error)]
pub enum DecommissionError {
    #[error("node {0} reports no admin address")]
    NoAdmin(String),
    #[error("node {node} at {url}: {reason}")]
    Remote {
        node: String,
        url: String,
        reason: String,
    },
}

/// Begins (`begin`) or cancels the decommission of `member`. Cancelling a
/// node that is not decommissioning is no error (Celeborn's RECOMMISSION of
/// an active worker is not one either).
pub async fn apply(
    state: &VendorState,
    member: &Member,
    begin: bool,
) -> Result<(), DecommissionError> {
    if member.local {
        let changed = if begin {
            state.admin.decommission.begin()
        } else {
            state.admin.decommission.cancel()
        };
        tracing::info!(
            begin,
            changed,
            "decommission requested over a vendor admin API"
        );
        return Ok(());
    }
    let node = member.node_id().to_string();
    let admin = &member.heartbeat.admin;
    if admin.is_empty() {
        return Err(DecommissionError::NoAdmin(node));
    }
    let remote = |url: &str, reason: String| DecommissionError::Remote {
        node: node.clone(),
        url: url.to_string(),
        reason,
    };
    let url = crate::ctl::admin_url(admin, "/api/v1/decommission")
        .map_err(|e| remote(admin, e.to_string()))?;
    let request = if begin {
        state.http.post(&url)
    } else {
        state.http.delete(&url)
    };
    let token = state.admin.token.as_ref().map_or("", |t| t.expose());
    let response = request
        .bearer_auth(token)
        .send()
        .await
        .map_err(|e| remote(&url, e.to_string()))?;
    let code = response.status();
    if code.is_success() || (!begin && code == reqwest::StatusCode::CONFLICT) {
        Ok(())
    } else {
        let body = response.text().await.unwrap_or_default();
        Err(remote(&url, format!("{code}: {}", body.trim())))
    }
}
