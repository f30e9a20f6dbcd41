//! Celeborn's authentication (0.5.0+, `celeborn.auth.enabled`): the pieces
//! that do not depend on a connection. So far the SASL DIGEST-MD5 exchange
//! ([`digest`]); registering applications' secrets on the master port,
//! binding connections to their application and the per-port gates are not
//! built yet (issue 16), and `celeborn.auth.enabled` clients are refused.
//! The protocol as the stock 0.5.x client speaks it is in
//! docs/celeborn.md#authentication.

pub mod digest;
