//! Quotas (`apps.max_*`): what one application, or one user's applications
//! together, may hold. A refusal changes nothing and is counted.

use crate::config::AppConfig;
use crate::error::{Result, StorageError};
use crate::tiers::partition::AppTally;

pub(super) struct Quotas {
    max_app_bytes: Option<u64>,
    max_app_partitions: Option<u64>,
    max_user_bytes: Option<u64>,
}

impl Quotas {
    pub(super) fn new(config: &AppConfig) -> Self {
        Quotas {
            max_app_bytes: config.max_app_bytes.map(|b| b.as_u64()),
            max_app_partitions: config.max_app_partitions,
            max_user_bytes: config.max_user_bytes.map(|b| b.as_u64()),
        }
    }

    /// Whether the application holds less than its byte quota (before it
    /// sets up more).
    pub(super) fn check_app(&self, app: &str, tally: &AppTally) -> Result<()> {
        if let Some(limit) = self.max_app_bytes {
            let used = tally.held();
            if used >= limit {
                return Err(refused(format!("application {app}"), "bytes", limit, used));
            }
        }
        Ok(())
    }

    /// Whether `bytes` more fit in the application's byte quota.
    pub(super) fn check_append(&self, app: &str, tally: &AppTally, bytes: u64) -> Result<()> {
        if let Some(limit) = self.max_app_bytes {
            let used = tally.held();
            if used.saturating_add(bytes) > limit {
                return Err(refused(format!("application {app}"), "bytes", limit, used));
            }
        }
        Ok(())
    }

    /// Whether the application may create one more partition.
    pub(super) fn check_new_partition(&self, app: &str, tally: &AppTally) -> Result<()> {
        if let Some(limit) = self.max_app_partitions {
            let used = tally.partitions();
            if used >= limit {
                return Err(refused(
                    format!("application {app}"),
                    "partitions",
                    limit,
                    used,
                ));
            }
        }
        Ok(())
    }

    /// Whether a user's applications, holding `used` together, are below
    /// the user quota; `used` is only computed when there is one.
    pub(super) fn check_user(&self, user: &str, used: impl FnOnce() -> u64) -> Result<()> {
        let Some(limit) = self.max_user_bytes else {
            return Ok(());
        };
        let used = used();
        if used >= limit {
            return Err(refused(format!("user {user}"), "bytes", limit, used));
        }
        Ok(())
    }
}

fn refused(who: String, what: &'static str, limit: u64, used: u64) -> StorageError {
    metrics::counter!("switchyard_quota_refusals_total", "quota" => what).increment(1);
    StorageError::QuotaExceeded {
        who,
        what,
        limit,
        used,
    }
}
