//! Celeborn's ports run on the shared frame server (`switchyard_frame::server`): its
//! connection loop, limits and failure handling; this names its types for Celeborn's
//! messages.

use crate::frame::Message;

pub use switchyard_frame::server::Handler;

/// Sends frames back on the connection a request came from.
pub type Replier = switchyard_frame::server::Replier<Message>;
