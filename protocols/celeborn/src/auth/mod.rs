//! Celeborn's authentication (0.5.0+, `celeborn.auth_enabled`): the SASL
//! DIGEST-MD5 exchange ([`digest`]) and the per-connection gate with the
//! applications' secrets ([`gate`]). What the stock clients do is in
//! docs/celeborn.md#authentication.

pub mod digest;
pub mod gate;

pub use gate::{app_of, check_app, check_shuffle_key, handshake, Answer, RemoteSecrets, Secrets};
